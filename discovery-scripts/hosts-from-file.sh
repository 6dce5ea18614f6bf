#!/bin/sh
# Host discovery from a file: prints the file, which holds one `host` or
# `host:slots` line per usable host (blank lines and # comments are fine).
# Edit the file to grow or shrink the job; replace it atomically
# (write a temporary file, then mv it over) so a run never sees half a list.
#
# Usage: elasticrun --host-discovery-script "discovery-scripts/hosts-from-file.sh FILE" ...
#        (or set ELASTICRUN_HOSTS_FILE and pass the script alone)
set -eu
file="${1:-${ELASTICRUN_HOSTS_FILE:-}}"
if [ -z "$file" ]; then
    echo "usage: $0 FILE (or set ELASTICRUN_HOSTS_FILE)" >&2
    exit 2
fi
if [ ! -r "$file" ]; then
    echo "$file: cannot read the host list" >&2
    exit 1
fi
exec cat -- "$file"
