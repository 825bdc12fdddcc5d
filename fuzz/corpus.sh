#!/bin/sh
# The fuzz corpora are committed as one archive per target, fuzz/corpus/<target>.tar.zst
# (a ustar tar of the corpus files by name, zstd-compressed), which tests/fuzz_corpus.rs
# replays; campaigns and cmin work on the folder fuzz/corpus/<target>/ (not committed).
#   fuzz/corpus.sh unpack [target...]  archive -> folder (adds to a folder already there)
#   fuzz/corpus.sh pack [target...]    folder -> archive (the whole folder, replacing it)
#   fuzz/corpus.sh list [target...]    files and bytes in each archive
# Packing is deterministic (names sorted, owner, mode and times fixed), so packing an
# unchanged folder gives the same archive. Needs GNU tar and the zstd command.
set -eu
fuzz=$(cd "$(dirname "$0")" && pwd)
cd "$fuzz/corpus"
mode=${1:?usage: fuzz/corpus.sh unpack|pack|list [target...]}
shift
targets=${*:-pickle_vm scanner_differential zip_archive checkpoint_open legacy round_trip wrappers}
for target in $targets; do
    archive="$target.tar.zst"
    case $mode in
    unpack)
        mkdir -p "$target"
        zstd -dcq "$archive" | tar -xf - -C "$target"
        echo "$target: $(ls "$target" | wc -l) files in fuzz/corpus/$target/"
        ;;
    pack)
        [ -d "$target" ] || { echo "no fuzz/corpus/$target/ to pack" >&2; exit 1; }
        # Only regular files, at the top: what the replay test accepts.
        if [ -n "$(find "$target" -mindepth 1 ! -type f | head -1)" ]; then
            echo "fuzz/corpus/$target/ holds something other than files" >&2
            exit 1
        fi
        (cd "$target" && find . -type f -printf '%P\n' | LC_ALL=C sort |
            tar --format=ustar --no-recursion --owner=0 --group=0 --numeric-owner \
                --mode=0644 --mtime=@0 -cf - -T -) |
            zstd -19 -T1 -q -c > "$archive.tmp"
        mv "$archive.tmp" "$archive"
        echo "$target: $(ls "$target" | wc -l) files," \
            "$(find "$target" -type f -printf '%s\n' | awk '{ b += $1 } END { print b + 0 }') bytes" \
            "-> fuzz/corpus/$archive, $(wc -c < "$archive") bytes"
        ;;
    list)
        zstd -dcq "$archive" | tar -tvf - |
            awk -v t="$target" '{ n++; b += $3 } END { print t ": " n " files, " b " bytes" }'
        ;;
    *)
        echo "usage: fuzz/corpus.sh unpack|pack|list [target...]" >&2
        exit 2
        ;;
    esac
done
