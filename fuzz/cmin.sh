#!/bin/sh
# Minimise the corpora after campaigns (cargo fuzz cmin), keeping the names of
# seed-* and regress-* files (cmin renames what it keeps by content hash), and
# keeping every regress-* file even when cmin finds it redundant.
#   fuzz/cmin.sh [target...]
set -eu
fuzz=$(cd "$(dirname "$0")" && pwd)
cd "$fuzz"
targets=${*:-pickle_vm scanner_differential zip_archive checkpoint_open legacy round_trip wrappers}
for target in $targets; do
    dir="corpus/$target"
    keep=$(mktemp -d)
    for f in "$dir"/seed-* "$dir"/regress-*; do
        [ -f "$f" ] && cp "$f" "$keep/"
    done
    nice -n 19 cargo fuzz cmin --sanitizer none "$target" "$dir" -- \
        -max_len=65536 -rss_limit_mb=2048 -timeout=10
    for f in "$keep"/*; do
        [ -f "$f" ] || continue
        h=$(sha1sum < "$f" | cut -c1-40)
        if [ -f "$dir/$h" ]; then
            mv "$dir/$h" "$dir/$(basename "$f")"
        elif [ "${f##*/regress-}" != "$f" ]; then
            cp "$f" "$dir/"
        fi
    done
    rm -rf "$keep"
    echo "$target: $(ls "$dir" | wc -l) files, $(du -sh "$dir" | cut -f1)"
done
