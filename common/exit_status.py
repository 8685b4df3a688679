"""The `tunefleet` command's exit statuses: one table for every command (the planner's, the fleet's, health, train,
serve), so that a script branches on the same number for the same outcome whichever command it ran."""

from __future__ import annotations

OK = 0  # done: fit and estimate say it fits, watch saw the job done, health saw the service serving
FAILED = 1  # the job failed (watch, train), the service is not serving (health), or an error not of the caller's
BAD_INPUT = 2  # a flag, a file or a request field is wrong (the message names it); train: the plan cannot run here
DOES_NOT_FIT = 3  # fit, estimate: the job does not fit (the table says by how much and what to change)
UNAVAILABLE = 4  # the service could not be reached; serve: the address could not be bound
CANCELLED = 5  # watch: the job was cancelled
DENIED = 6  # the caller's role does not allow it (the message names the role needed)
REFUSED = 7  # refused as things stand: over the team's budget (the message says by how much)
UNAUTHENTICATED = 8  # no token, or one the service does not know
NOT_FOUND = 9  # no such job, health service or quarantined host
INTERRUPTED = 10  # train: stopped by SIGUSR1 without ending (run the plan again to resume)
INTERRUPTED_BY_USER = 130  # Ctrl-C (the shell's 128 + SIGINT)

HELP = (f"exit status (every tunefleet command): {OK} ok (fit, estimate: it fits; watch: the job is done), "
        f"{FAILED} failed\n(the job, or the service is not serving), {BAD_INPUT} bad input (the message names the "
        f"flag or field), {DOES_NOT_FIT} does not fit,\n{UNAVAILABLE} service unreachable, {CANCELLED} the job was "
        f"cancelled, {DENIED} your role does not allow it, {REFUSED} refused as things stand\n(over the team's "
        f"budget), {UNAUTHENTICATED} no token or an unknown one (--token, TUNEFLEET_TOKEN or --token-file), "
        f"{NOT_FOUND} no such\njob (or host, or health service), {INTERRUPTED} train: interrupted by SIGUSR1 (run "
        "the plan again to resume)\n")
