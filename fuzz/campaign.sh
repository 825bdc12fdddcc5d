#!/bin/sh
# Run one fuzz campaign for a CPU-time budget: nice'd, one process at a time,
# logged to fuzz/logs/.
#   fuzz/campaign.sh <target> <cpu-seconds>
# libFuzzer's fork mode (-fork=1: one child at a time) keeps going after a timeout,
# so a campaign survives being paused (SIGSTOP) by other work on the machine;
# every timeout input is still saved to fuzz/artifacts/<target>/ and must be rerun
# (a paused unit looks like a timeout). Runs in 600 s chunks until the CPU time
# used (user + system, measured by /usr/bin/time) reaches the budget.
# The corpus grows in fuzz/corpus/<target>/ (unpacked from fuzz/corpus/<target>.tar.zst
# by fuzz/corpus.sh when absent); crashes stop the campaign. Afterwards
# `fuzz/cmin.sh <target>` minimises the folder and packs it back into the archive.
set -eu
target=$1
budget=$2
fuzz=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$fuzz/logs" "$fuzz/artifacts/$target"
[ -d "$fuzz/corpus/$target" ] || sh "$fuzz/corpus.sh" unpack "$target"
stamp=$(date +%Y%m%d-%H%M%S)
log="$fuzz/logs/$target-$stamp.log"
cd "$fuzz/logs"
nice -n 19 cargo fuzz build --fuzz-dir "$fuzz" --sanitizer none "$target" >> "$log" 2>&1
bin="$fuzz/target/x86_64-unknown-linux-gnu/release/$target"
echo "campaign $target budget ${budget} CPU-s started $(date -Is)" >> "$log"
used=0
while [ "$used" -lt "$budget" ]; do
    chunk=$((budget - used < 600 ? budget - used + 5 : 600))
    status=0
    /usr/bin/time -f "cpu %U %S" -o "$target.time.out" nice -n 19 "$bin" \
        -artifact_prefix="$fuzz/artifacts/$target/" \
        -dict="$fuzz/dict/pickle.dict" -max_len=65536 -rss_limit_mb=2048 -timeout=10 \
        -fork=1 -ignore_timeouts=1 -max_total_time=$chunk -print_final_stats=1 \
        "$fuzz/corpus/$target" >> "$log" 2>&1 || status=$?
    cat "$target.time.out" >> "$log"
    used=$(awk -v u="$used" '/^cpu/ { printf "%d", u + $2 + $3 }' "$target.time.out")
    echo "campaign $target: $used CPU-s used so far $(date -Is)" >> "$log"
    if [ "$status" -ne 0 ]; then
        echo "exit status $status: stopping" >> "$log"
        break
    fi
done
echo "campaign $target finished $(date -Is), $used CPU-s" >> "$log"
echo "fuzz/corpus/$target/ is not packed yet: fuzz/cmin.sh $target minimises and packs it"
