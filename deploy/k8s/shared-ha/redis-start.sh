#!/bin/sh
# Start one Redis server of the HA ledger (a pod of StatefulSet a2a-gateway-redis). Writes
# /conf/redis.conf (the password from the mounted Secret goes there, never on a command line)
# and runs redis-server as the primary, or as a replica of the primary the Sentinels name.
# On the very first start no Sentinel answers yet: pod 0 is the primary, the others its replicas.
set -eu
SERVICE=ledger
ME="$(hostname).a2a-gateway-redis-headless"
PRIMARY=""
for i in 0 1 2; do
  answer="$(REDISCLI_AUTH="$(cat /etc/redis-auth/sentinel-password)" timeout 3 \
    redis-cli -h "a2a-gateway-redis-sentinel-$i.a2a-gateway-redis-sentinel" -p 26379 \
    SENTINEL get-master-addr-by-name "$SERVICE" 2>/dev/null | head -n 1 || true)"
  case "$answer" in
    "" | *" "*) ;;                      # no answer, or an error text
    *) PRIMARY="$answer"; break ;;
  esac
done
[ -n "$PRIMARY" ] || PRIMARY="a2a-gateway-redis-0.a2a-gateway-redis-headless"
umask 077
cat > /conf/redis.conf <<CONF
port 6379
dir /data
# a terminal state the gateway recorded must survive a restart of this server too
appendonly yes
appendfsync always
# refuse writes before the container's memory limit; never evict ledger records
maxmemory 768mb
maxmemory-policy noeviction
# reachable from the gateways, the other servers and the Sentinels only (NetworkPolicy)
protected-mode no
requirepass "$(cat /etc/redis-auth/password)"
masterauth "$(cat /etc/redis-auth/password)"
# the Sentinels and the other servers know this one by its stable name
replica-announce-ip $ME
CONF
if [ "$PRIMARY" != "$ME" ]; then
  echo "replicaof $PRIMARY 6379" >> /conf/redis.conf
fi
exec redis-server /conf/redis.conf
