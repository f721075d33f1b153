#!/usr/bin/env bash
# Stand-in for the Oxbow broker binary that runs the real Apache Kafka broker (KRaft, one combined
# broker+controller node), so the compatibility suite itself can be checked against the reference:
#
#   OXBOW_BROKER_BIN=$PWD/scripts/kafka-reference-broker.sh mvn -q -B test
#
# It takes the same `--override key=value` arguments as oxbow-broker. The first run fetches the
# Kafka broker jars from Maven Central into target/kafka-ref/lib (needs `mvn`).
set -euo pipefail

KAFKA_VERSION="${KAFKA_REF_VERSION:-4.1.1}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ref="$here/target/kafka-ref"
lib="$ref/lib-$KAFKA_VERSION"

if [ ! -f "$lib/.complete" ]; then
  mkdir -p "$ref"
  cat > "$ref/pom.xml" <<POM
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>io.oxbow</groupId><artifactId>kafka-ref</artifactId><version>0</version>
  <dependencies>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka_2.13</artifactId><version>$KAFKA_VERSION</version></dependency>
  </dependencies>
</project>
POM
  mvn -q -B -f "$ref/pom.xml" dependency:copy-dependencies -DoutputDirectory="$lib" -DincludeScope=runtime >&2
  touch "$lib/.complete"
fi
# Kafka's jars bring slf4j-api 1.7 and log4j 2 but no slf4j binding (and no reload4j: the
# slf4j-reload4j binding alone makes StorageTool die with NoClassDefFoundError
# org/apache/log4j/Level): log4j-slf4j-impl routes the broker's logging to log4j 2.
if [ ! -f "$ref/logging/log4j-slf4j-impl-2.24.3.jar" ]; then
  mvn -q -B dependency:copy -Dartifact=org.apache.logging.log4j:log4j-slf4j-impl:2.24.3 -DoutputDirectory="$ref/logging" >&2
fi
printf '%s\n' 'rootLogger.level=INFO' 'rootLogger.appenderRef.stdout.ref=STDOUT' 'appender.stdout.type=Console' \
  'appender.stdout.name=STDOUT' 'appender.stdout.layout.type=PatternLayout' \
  'appender.stdout.layout.pattern=[%d] %p %m (%c)%n' \
  'logger.request.name=kafka.request.logger' 'logger.request.level=WARN' \
  'logger.state.name=state.change.logger' 'logger.state.level=WARN' > "$ref/log4j2.properties"

declare -A conf=()
while [ $# -gt 0 ]; do
  case "$1" in
    --override) kv="$2"; conf["${kv%%=*}"]="${kv#*=}"; shift 2 ;;
    *) echo "kafka-reference-broker: unknown argument $1" >&2; exit 2 ;;
  esac
done

datadir="${conf[log.dirs]:?log.dirs override required}"
# the controller port is kept in the data dir so that a restart finds the same quorum
if [ -f "$datadir/.controller-port" ]; then
  cport="$(cat "$datadir/.controller-port")"
else
  cport="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
  echo "$cport" > "$datadir/.controller-port"
fi
# Extra listeners in the listeners override (SSL, SASL_SSL, ...) are kept; CONTROLLER is appended
# to them and, unless the given listener.security.protocol.map names it, to that map.
protocols="${conf[listener.security.protocol.map]:-PLAINTEXT:PLAINTEXT}"
case ",$protocols" in
  *,CONTROLLER:*) ;;
  *) protocols="$protocols,CONTROLLER:PLAINTEXT" ;;
esac
unset 'conf[listener.security.protocol.map]'
props="$datadir/server.properties"
{
  echo "process.roles=broker,controller"
  echo "node.id=1"
  echo "controller.quorum.voters=1@127.0.0.1:$cport"
  echo "controller.listener.names=CONTROLLER"
  echo "inter.broker.listener.name=PLAINTEXT"
  echo "listener.security.protocol.map=$protocols"
  echo "offsets.topic.replication.factor=1"
  echo "transaction.state.log.replication.factor=1"
  echo "transaction.state.log.min.isr=1"
  echo "group.initial.rebalance.delay.ms=0"
  for k in "${!conf[@]}"; do
    if [ "$k" = listeners ]; then
      echo "listeners=${conf[$k]},CONTROLLER://127.0.0.1:$cport"
    else
      echo "$k=${conf[$k]}"
    fi
  done
} > "$props"

cp=("$lib"/*.jar "$ref/logging/log4j-slf4j-impl-2.24.3.jar")
classpath="$(IFS=:; echo "${cp[*]}")"
jvm=(java -Xms256m -Xmx768m -XX:+UseSerialGC -Dlog4j2.configurationFile="$ref/log4j2.properties" -cp "$classpath")

[ -f "$datadir/meta.properties" ] || "${jvm[@]}" kafka.tools.StorageTool format -t "$(python3 -c 'import base64,uuid; print(base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("="))')" -c "$props" >&2
exec "${jvm[@]}" kafka.Kafka "$props"
