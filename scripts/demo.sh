#!/usr/bin/env bash
# README command 1: the main pipeline on the embedded default scenario, KIP-966 "last replica standing"
# with ELR off (conf/scenarios/last-replica-standing-elr-off.yaml): simulate -> verify -> ingest ->
# replay -> the forensic view at T3, a recovery plan, the partition's timeline and the HTML report -> the
# audit, ending with the incidents and findings an operator would act on.
# Creates/refreshes .venv first, so it works on a fresh machine with only python3.11+ and Java 17.
# The lake goes to ./kraft-lake (or $KRAFT_AUDIT_LAKE); plans to ./plans; the report to ./report.html.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
export SPARK_LOCAL_IP="${SPARK_LOCAL_IP:-127.0.0.1}"
LAKE="${KRAFT_AUDIT_LAKE:-./kraft-lake}"
KA=.venv/bin/kraft-audit
SCENARIO=last-replica-standing-elr-off
DATA="data/$SCENARIO"
CLUSTER=lrs-demo

echo "== 1. simulate (deterministic: seed 0 writes the same bytes every time): kraft-audit simulate $SCENARIO -o $DATA"
$KA simulate "$SCENARIO" -o "$DATA" --seed 0
echo
echo "== 2. integrity check (no Spark): kraft-audit verify --log-dir $DATA"
$KA verify --log-dir "$DATA"
echo
echo "== 3. bronze (Spark -> Delta): kraft-audit ingest --cluster $CLUSTER --log-dir $DATA --log-info $DATA/log-info"
$KA ingest --cluster "$CLUSTER" --log-dir "$DATA" --log-info "$DATA/log-info" --lake "$LAKE"
echo
echo "== 4. silver: kraft-audit replay --cluster $CLUSTER"
$KA replay --cluster "$CLUSTER" --lake "$LAKE"
echo
T3=$(ls "$DATA"/log-info/broker-1-at-*.json | sed 's/.*-at-\([0-9]*\)\.json/\1/')
echo "== 5. forensic view at T3 (offset $T3): followers back, payments-0 leaderless, its last ISR member down"
$KA describe --lake "$LAKE" --cluster "$CLUSTER" --at-offset "$T3" --topic payments
echo
echo "== 6. which replica should lead? KIP-966 aggressive recovery at T3, as ready-to-run files in ./plans"
$KA plan --cluster "$CLUSTER" --lake "$LAKE" --at-offset "$T3" --election-type longest_log_aggressive -o plans
echo
echo "== 7. payments-0 change by change, with what triggered each: kraft-audit timeline --topic payments --partition 0"
$KA timeline --cluster "$CLUSTER" --lake "$LAKE" --topic payments --partition 0
echo
echo "== 8. the same in a browser, one self-contained file: kraft-audit report -o report.html"
$KA report --cluster "$CLUSTER" --lake "$LAKE" --log-info "$DATA/log-info" -o report.html
echo
echo "== 9. the audit of the whole log (gold tables violations, incidents, recovery_candidates): kraft-audit audit --cluster $CLUSTER"
set +e
$KA audit --cluster "$CLUSTER" --lake "$LAKE"
code=$?
set -e
echo "(kraft-audit audit exit code: $code -- 1 = findings at or above --fail-on ERROR, what a scheduler acts on)"
