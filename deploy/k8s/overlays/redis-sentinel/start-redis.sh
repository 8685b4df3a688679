#!/bin/sh
# A Redis server of the Sentinel set: a replica of the primary the sentinels name now; when no sentinel answers
# (the set's first start), redis-0 is the primary and the others its replicas. A server that was the primary and
# restarts comes back as a replica of the one promoted meanwhile, so what it alone held never reappears. The
# sentinels take no password (REDISCLI_AUTH is the servers'; NetworkPolicy redis-sentinel-from-fleet limits who asks).
set -eu
me="$(hostname).redis.${POD_NAMESPACE}.svc.cluster.local"
primary=""
for i in 0 1 2; do
  primary="$(env -u REDISCLI_AUTH redis-cli -h "redis-sentinel-$i.redis-sentinel.${POD_NAMESPACE}.svc.cluster.local" -p 26379 --raw \
    sentinel get-master-addr-by-name tunefleet 2>/dev/null | head -n 1 || true)"
  [ -n "$primary" ] && break
done
[ -n "$primary" ] || primary="redis-0.redis.${POD_NAMESPACE}.svc.cluster.local"
set -- /etc/redis/redis.conf --requirepass "$REDISCLI_AUTH" --masterauth "$REDISCLI_AUTH" --replica-announce-ip "$me"
if [ "$primary" != "$me" ]; then
  set -- "$@" --replicaof "$primary" 6379
fi
exec redis-server "$@"
