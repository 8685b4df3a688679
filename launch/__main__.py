from launch.command import main

raise SystemExit(main())
