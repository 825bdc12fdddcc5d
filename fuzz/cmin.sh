#!/bin/sh
# Minimise the corpora after campaigns (cargo fuzz cmin), keeping the names of
# seed-* and regress-* files (cmin renames what it keeps by content hash), and
# keeping every regress-* file even when cmin finds it redundant; then pack each
# minimised folder back into fuzz/corpus/<target>.tar.zst (fuzz/corpus.sh), the
# archive that is committed and replayed. A target's folder is unpacked from its
# archive first when missing.
#   fuzz/cmin.sh [target...]
set -eu
fuzz=$(cd "$(dirname "$0")" && pwd)
cd "$fuzz"
targets=${*:-pickle_vm scanner_differential zip_archive checkpoint_open legacy round_trip wrappers}
for target in $targets; do
    dir="corpus/$target"
    [ -d "$dir" ] || sh corpus.sh unpack "$target"
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
    nice -n 19 sh corpus.sh pack "$target"
done
