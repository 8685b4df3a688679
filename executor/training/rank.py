"""One rank of a run (the launcher starts `python -m executor.training.rank` once per GPU, or per CPU rank): the process
is prepared to train before the recipe, and with it the training stack, is imported."""

from executor.training.process import prepare

prepare()

from executor.training.recipe import exit_now, main  # noqa: E402  (after prepare: it hides bitsandbytes before PEFT)

exit_now(main())
