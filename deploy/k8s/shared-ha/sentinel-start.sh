#!/bin/sh
# Start one Sentinel of the HA ledger (a pod of StatefulSet a2a-gateway-redis-sentinel).
# Writes /conf/sentinel.conf (Sentinel rewrites it as it learns) from the Secret's passwords and
# the current primary as another Sentinel knows it (pod 0 of a2a-gateway-redis on the very
# first start), with a Sentinel id derived from the pod's stable name, so a restarted Sentinel
# is the same one to its peers (no stale entries that would skew the quorum).
set -eu
SERVICE=ledger
ME="$(hostname).a2a-gateway-redis-sentinel"
SENTINEL_PASSWORD="$(cat /etc/redis-auth/sentinel-password)"
PRIMARY=""
for i in 0 1 2; do
  peer="a2a-gateway-redis-sentinel-$i.a2a-gateway-redis-sentinel"
  [ "$peer" = "$ME" ] && continue
  answer="$(REDISCLI_AUTH="$SENTINEL_PASSWORD" timeout 3 \
    redis-cli -h "$peer" -p 26379 SENTINEL get-master-addr-by-name "$SERVICE" 2>/dev/null | head -n 1 || true)"
  case "$answer" in
    "" | *" "*) ;;
    *) PRIMARY="$answer"; break ;;
  esac
done
[ -n "$PRIMARY" ] || PRIMARY="a2a-gateway-redis-0.a2a-gateway-redis-headless"
umask 077
cat > /conf/sentinel.conf <<CONF
port 26379
dir /conf
sentinel resolve-hostnames yes
sentinel announce-hostnames yes
sentinel announce-ip $ME
sentinel myid $(printf '%s' "$ME" | sha1sum | cut -c1-40)
# the Sentinels' own password (the gateways' ledger.sentinel_password_file), also between them
requirepass "$SENTINEL_PASSWORD"
sentinel sentinel-pass "$SENTINEL_PASSWORD"
# two of three agree the primary is down, then one of them promotes the best replica
sentinel monitor $SERVICE $PRIMARY 6379 2
sentinel auth-pass $SERVICE "$(cat /etc/redis-auth/password)"
sentinel down-after-milliseconds $SERVICE 5000
sentinel failover-timeout $SERVICE 60000
sentinel parallel-syncs $SERVICE 1
CONF
exec redis-sentinel /conf/sentinel.conf
