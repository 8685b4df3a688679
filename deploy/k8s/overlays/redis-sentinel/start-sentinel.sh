#!/bin/sh
# A sentinel of the set: it watches the primary the other sentinels name now (redis-0 on the set's first start),
# down after 5 s without an answer (Sentinel's default is 30 s), promoted when two of three agree. Sentinel
# rewrites its config as the set fails over: it lives in the pod's writable /data.
set -eu
ns="${POD_NAMESPACE}"
me="$(hostname).redis-sentinel.${ns}.svc.cluster.local"
primary=""
for i in 0 1 2; do
  peer="redis-sentinel-$i.redis-sentinel.${ns}.svc.cluster.local"
  [ "$peer" = "$me" ] && continue
  primary="$(env -u REDISCLI_AUTH redis-cli -h "$peer" -p 26379 --raw sentinel get-master-addr-by-name tunefleet 2>/dev/null \
    | head -n 1 || true)"
  [ -n "$primary" ] && break
done
[ -n "$primary" ] || primary="redis-0.redis.${ns}.svc.cluster.local"
cat > /data/sentinel.conf <<CONF
port 26379
sentinel resolve-hostnames yes
sentinel announce-hostnames yes
sentinel announce-ip ${me}
sentinel monitor tunefleet ${primary} 6379 2
sentinel auth-pass tunefleet ${REDISCLI_AUTH}
sentinel down-after-milliseconds tunefleet 5000
sentinel failover-timeout tunefleet 60000
sentinel parallel-syncs tunefleet 1
CONF
exec redis-sentinel /data/sentinel.conf
