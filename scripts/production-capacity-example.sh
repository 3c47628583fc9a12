#!/bin/bash
# The worked example of docs/production-capacity.md: skillhost serving hello, watched, scraped by a
# real Prometheus every 5 s; sixteen Rust skills added by a cmds file driven into it, then hey
# sending requests at rising rates; then capacity --prometheus. Needs root (the watch), a
# release build, prometheus and build/bin/hey (scripts/test.sh installs them). About 4 minutes.
set -e
cd "$(dirname "$0")/.."
W=${WORKED:-/tmp/production-capacity-example}; rm -rf $W; mkdir -p $W/skills
cp build/skills/hello.wasm $W/skills/hello.wasm
target/release/skillhost --skills-dir $W/skills --port 18081 --scan-interval-ms 50 > $W/host.log 2>&1 &
HOST=$!
sleep 1
target/release/skillprof watch --attach $HOST --host-url http://127.0.0.1:18081 --listen 127.0.0.1:19477 > $W/watch.log 2>&1 &
WATCH=$!
printf 'global:\n  scrape_interval: 5s\nscrape_configs:\n  - job_name: skillprof\n    static_configs:\n      - targets: ["127.0.0.1:19477"]\n' > $W/prometheus.yml
prometheus --config.file=$W/prometheus.yml --storage.tsdb.path=$W/tsdb --web.listen-address=127.0.0.1:19090 > $W/prom.log 2>&1 &
PROM=$!
trap 'kill $HOST $WATCH $PROM 2>/dev/null' EXIT
sleep 8
# Skills added over time: the watched host's own adds (a cmds file driven into it).
printf 'add_rs\n3000 execute_all Worked 0 0\n' > $W/adds.cmds
for step in 1 2 3 4 5; do printf '3 add_rs\n1500 execute_all Worked 0 0\n' >> $W/adds.cmds; done
target/release/skillprof run $W/adds.cmds --attach $HOST --host-url http://127.0.0.1:18081 --skills-dir $W/skills --no-probes --out $W/runs > $W/run.log 2>&1
# Traffic to hello at rising rates (hey: -c workers, -q requests per second each).
for q in 10 40 100 200 400; do
  build/bin/hey -z 25s -c 8 -q $q -m POST -T application/json -d '{"skill":"hello","input":{}}' http://127.0.0.1:18081/execute_skill > $W/hey-$q.txt
done
build/bin/hey -z 25s -c 64 -m POST -T application/json -d '{"skill":"hello","input":{}}' http://127.0.0.1:18081/execute_skill > $W/hey-max.txt
sleep 12
date -u
target/release/skillprof capacity --prometheus http://127.0.0.1:19090 --since 6m --step 5 --target 'p99<=2ms' > $W/capacity.txt 2> $W/capacity.err || true
cat $W/capacity.txt $W/capacity.err
