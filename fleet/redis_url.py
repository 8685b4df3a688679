"""Where the fleet's Redis is, from one URL: a plain `redis://` (or `rediss://`, `unix://`) server, or a
Sentinel-managed primary that the fleet follows across failovers.

    redis+sentinel://[[user]:password@]host:port[,host:port...]/service[/db][?options]

The hosts are the sentinels (port 26379 when left out); `service` is the name they monitor (`sentinel monitor
<service> ...`); the password is the Redis servers' (`sentinel_password=` gives the sentinels' own, when they have
one). Options, on either kind of URL (durable acknowledgements: fleet.durability):

- `wait_replicas=N`: a write the fleet makes a promise on waits until N replicas hold it (default 1 behind
  Sentinel, 0 for a plain server: there is no replica to wait for);
- `wait_timeout_ms=M`: how long one such wait lasts at most (default WAIT_TIMEOUT_MS).

A URL that cannot be read is refused naming the part (RedisUrlError), before anything connects.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from urllib.parse import parse_qs, unquote, urlencode, urlsplit, urlunsplit

SENTINEL_SCHEME = "redis+sentinel"
PLAIN_SCHEMES = ("redis", "rediss", "unix")
SENTINEL_PORT = 26379  # Sentinel's default port (redis.io/docs/latest/operate/oss_and_stack/management/sentinel)
# A promise write waits this long at most for its replicas: a replica on the same network acknowledges within
# milliseconds (it acks every second on its own, and at once when the primary asks: WAIT's GETACK).
WAIT_TIMEOUT_MS = 2_000
MAX_WAIT_TIMEOUT_MS = 8_000  # below the connections' socket timeout (fleet.connection.SOCKET_TIMEOUT_S)
_FLEET_OPTIONS = ("wait_replicas", "wait_timeout_ms", "sentinel_password")


class RedisUrlError(ValueError):
    """The fleet's Redis URL cannot be used; the message names the part."""

    def __init__(self, part: str, problem: str) -> None:
        super().__init__(f"Redis URL: {part} {problem}")
        self.part = part


@dataclass(frozen=True)
class RedisAddress:
    """A parsed fleet Redis URL. `url` is the plain server's (without the fleet's own options); behind Sentinel,
    `sentinels` and `service` say where to ask for the primary."""

    url: str = ""
    sentinels: tuple[tuple[str, int], ...] = ()
    service: str = ""
    db: int = 0
    username: str | None = None
    password: str | None = None
    sentinel_password: str | None = None
    wait_replicas: int = 0
    wait_timeout_ms: int = WAIT_TIMEOUT_MS

    @property
    def managed(self) -> bool:
        return bool(self.sentinels)

    def redacted(self) -> str:
        """The address for a log line: no password."""
        if self.managed:
            hosts = ",".join(f"{h}:{p}" for h, p in self.sentinels)
            return f"{SENTINEL_SCHEME}://{hosts}/{self.service}/{self.db}"
        parts = urlsplit(self.url)
        return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))


def parse_redis_url(url: str) -> RedisAddress:
    """Read a fleet Redis URL (module docstring); RedisUrlError names the part that is wrong."""
    scheme, sep, _ = url.partition("://")
    if not sep or scheme not in (SENTINEL_SCHEME, *PLAIN_SCHEMES):
        raise RedisUrlError("scheme", f"{scheme!r} is not one the fleet reads: use redis://host:port/db, "
                                      f"rediss:// (TLS), unix:///path, or {SENTINEL_SCHEME}://host:port[,host:port]"
                                      "/service[/db]")
    parts = urlsplit(url)
    options = _options(parts.query)
    managed = scheme == SENTINEL_SCHEME
    replicas = _count(options, "wait_replicas", 1 if managed else 0)
    timeout_ms = _count(options, "wait_timeout_ms", WAIT_TIMEOUT_MS)
    if replicas and not 1 <= timeout_ms <= MAX_WAIT_TIMEOUT_MS:
        raise RedisUrlError("wait_timeout_ms", f"must be 1-{MAX_WAIT_TIMEOUT_MS:,} when wait_replicas is set (0 would "
                                               "wait forever; longer would outlast a connection's socket timeout)")
    sentinel_password = options.get("sentinel_password")
    if not managed:
        if sentinel_password is not None:
            raise RedisUrlError("sentinel_password", f"is for a {SENTINEL_SCHEME}:// URL only")
        rest = {k: v for k, v in options.items() if k not in _FLEET_OPTIONS}
        plain = urlunsplit(parts._replace(query=urlencode(rest)))
        return RedisAddress(url=plain, wait_replicas=replicas, wait_timeout_ms=timeout_ms)
    userinfo, _, hosts = parts.netloc.rpartition("@")
    username, _, password = userinfo.partition(":") if userinfo else ("", "", "")
    path = [p for p in parts.path.split("/") if p]
    if not path:
        raise RedisUrlError("service", "is missing: name the primary the sentinels monitor, as in "
                                       f"{SENTINEL_SCHEME}://host:26379/mymaster/0")
    if len(path) > 2:
        raise RedisUrlError("path", f"{parts.path!r} has more than /service/db")
    unknown = sorted(set(options) - set(_FLEET_OPTIONS))
    if unknown:
        raise RedisUrlError(unknown[0], f"is not an option of a {SENTINEL_SCHEME}:// URL "
                                        f"(it takes {', '.join(_FLEET_OPTIONS)})")
    return RedisAddress(sentinels=tuple(_host_port(h) for h in hosts.split(",")), service=unquote(path[0]),
                        db=_db(path[1]) if len(path) == 2 else 0, username=unquote(username) or None,
                        password=unquote(password) or None, sentinel_password=sentinel_password,
                        wait_replicas=replicas, wait_timeout_ms=timeout_ms)


def argument(text: str) -> str:
    """argparse's type for a --redis flag: the URL as given, once it reads (a usage error naming the part if not)."""
    try:
        parse_redis_url(text)
    except RedisUrlError as e:
        raise argparse.ArgumentTypeError(str(e)) from e
    return text


def _options(query: str) -> dict[str, str]:
    values = parse_qs(query, keep_blank_values=True)
    return {k: v[-1] for k, v in values.items()}


def _count(options: dict[str, str], name: str, default: int) -> int:
    text = options.get(name)
    if text is None:
        return default
    if not text.isdigit():
        raise RedisUrlError(name, f"must be a whole number >= 0, not {text!r}")
    return int(text)


def _db(text: str) -> int:
    if not text.isdigit():
        raise RedisUrlError("db", f"must be a database number (0-15 by default), not {text!r}")
    return int(text)


def _host_port(text: str) -> tuple[str, int]:
    if not text:
        raise RedisUrlError("sentinels", "list has an empty entry: separate host:port pairs with single commas")
    host, sep, port = text.rpartition(":") if not text.endswith("]") else (text, "", "")
    if not sep:
        return text.strip("[]"), SENTINEL_PORT
    if not host:
        raise RedisUrlError("sentinels", f"entry {text!r} has no host")
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise RedisUrlError("sentinels", f"entry {text!r} has no valid port (1-65535)")
    return host.strip("[]"), int(port)
