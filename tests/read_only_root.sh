#!/usr/bin/env bash
# Run a command as a pod with readOnlyRootFilesystem runs it: in a private mount namespace (started by
# `unshare -m`, as root) whose root file system is read-only, but for the directories named before
# `--` (the pod's writable volumes: its emptyDirs). Usage: unshare -m read_only_root.sh DIR... -- CMD...
set -euo pipefail
writable=()
while [[ $# -gt 0 && "$1" != "--" ]]; do writable+=("$1"); shift; done
shift
mount --make-rprivate /
mount --bind / /
mount -o remount,bind,ro /
for dir in "${writable[@]}"; do
    mount --bind "$dir" "$dir"
    mount -o remount,bind,rw "$dir"
done
if touch /.read-only-root-check 2>/dev/null; then
    echo "read_only_root.sh: the root file system is still writable" >&2
    exit 1
fi
exec "$@"
