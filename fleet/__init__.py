"""Fleet state: the only code that names a Redis key or holds a Lua script (the key table is fleet.keys), and the
only user of rq (fleet.queues). The executor service and the workers call it; training never does."""
