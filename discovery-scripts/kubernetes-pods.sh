#!/bin/sh
# Host discovery in Kubernetes: prints `ip:slots` for every running, ready pod
# that matches a label selector (IPv6 pod IPs in brackets), through kubectl.
#
# Usage: kubernetes-pods.sh -l SELECTOR [-n NAMESPACE] [-s SLOTS]
#   -l  label selector of the training pods, e.g. app=train (required)
#   -n  namespace [default: kubectl's current one]
#   -s  slots per pod [default: 1, or ELASTICRUN_SLOTS_PER_POD]
#
# e.g. elasticrun --host-discovery-script "discovery-scripts/kubernetes-pods.sh -l app=train -s 4" ...
# The service account running it needs `get` and `list` on pods.
set -eu
selector="" namespace="" slots="${ELASTICRUN_SLOTS_PER_POD:-1}"
while getopts "l:n:s:" opt; do
    case "$opt" in
        l) selector="$OPTARG" ;;
        n) namespace="$OPTARG" ;;
        s) slots="$OPTARG" ;;
        *) echo "usage: $0 -l SELECTOR [-n NAMESPACE] [-s SLOTS]" >&2; exit 2 ;;
    esac
done
if [ -z "$selector" ]; then
    echo "usage: $0 -l SELECTOR [-n NAMESPACE] [-s SLOTS]" >&2
    exit 2
fi
case "$slots" in
    ''|*[!0-9]*|0) echo "$0: slots must be a positive integer, not '$slots'" >&2; exit 2 ;;
esac
set -- get pods -l "$selector" --field-selector=status.phase=Running \
    -o 'jsonpath={range .items[*]}{.status.podIP}{" "}{.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}'
if [ -n "$namespace" ]; then
    set -- -n "$namespace" "$@"
fi
# Fail (and let elasticrun keep the last good host set) if kubectl does.
pods=$(kubectl "$@")
printf '%s\n' "$pods" | awk -v slots="$slots" '
    $1 != "" && $2 == "True" {
        if (index($1, ":") > 0) printf "[%s]:%s\n", $1, slots
        else printf "%s:%s\n", $1, slots
    }'
