#!/bin/bash
# The curve behind the host-to-device chunk size: 64 MiB copies through
# rgpud (over loopback TCP and the same-host path) for chunk sizes from
# 256 KiB to 4 MiB (RGPU_CHUNK_KB), pinned and pageable, one rgpud.
#   bench/chunk-sweep.sh [--emulated]
# Prints a table; numbers on the emulated device mean nothing.
set -u
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/.." && pwd)
B=${top_builddir:-$top/_build}
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
args=()
[ "${1:-}" = --emulated ] && args=(--emulated)
"$B/daemon/rgpud" "${args[@]}" --open --listen "127.0.0.1:$PORT" -v warn >/tmp/chunk-sweep-rgpud.log 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null' EXIT
sleep 1
printf '%-6s %-9s %9s %s\n' path "host mem" "chunk" "GB/s (64 MiB h2d, median)"
for path in tcp local; do
	for kb in 256 512 1024 2048 4096; do
		out=$(RGPU_TRANSPORT=$path RGPU_CHUNK_KB=$kb RGPU_SERVERS=127.0.0.1:$PORT/0 \
			LD_LIBRARY_PATH=$B/client/.libs "$B/bench/bw_lat" --no-lat --max 64M --target sweep 2>&1)
		for mem in pinned pageable; do
			g=$(echo "$out" | awk -v m="$mem" '$1 == "h2d" && $2 == m && $3 == "64" && $4 == "MiB" {print $5}')
			printf '%-6s %-9s %6d KiB %s\n' "$path" "$mem" "$kb" "${g:-?}"
		done
	done
done
