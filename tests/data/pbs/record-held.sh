#!/bin/bash
# Records tests/data/pbs/qstat-f-x-held-failed-starts.txt from the recipe's three-host cluster
# (started): a job PBS held itself after it failed to start 21 times ("job held, too many failed
# attempts to run"). The fault: rlpbs-n1 cannot resolve the head's name for the time of the
# recording (its /etc/netns hosts file without that line, put back at the end), so its MoM rejects
# the join (Exit_status -3; a sister whose connection closes instead ends each try -30, as a soak
# saw). Run as root, beside nothing else using the cluster.
set -euo pipefail
out=$(cd "$(dirname "$0")" && pwd)/qstat-f-x-held-failed-starts.txt
R=${RLPBS_BIN:-$(cd "$(dirname "$0")/../../.." && pwd)/../shared/recipes/openpbs/bin}
hosts=/etc/netns/rlpbs-n1/hosts; keep=$(mktemp)
cp "$hosts" "$keep"; trap 'cat "$keep" > "$hosts"; rm -f "$keep"' EXIT
grep -v ' rlpbs-head$' "$keep" > "$hosts.new"; cat "$hosts.new" > "$hosts"; rm -f "$hosts.new"  # same inode
d=$(mktemp -d /tmp/rl-pbs-record.XXXXXX); chmod 755 "$d"
printf '#!/bin/bash\n/opt/pbs/bin/pbsdsh -- /bin/hostname\n' > "$d/j.sh"; chmod 755 "$d/j.sh"
id=$("$R/rlpbs-exec" -u pbsuser /opt/pbs/bin/qsub -l select=3:ncpus=1 -l place=scatter -l walltime=60 \
	-o "$d" -j oe "$d/j.sh")
until "$R/rlpbs-exec" /opt/pbs/bin/qstat -f -x "$id" | grep -q 'job_state = H'; do sleep 1; done
"$R/rlpbs-exec" /opt/pbs/bin/qstat -f -x "$id" > "$out"
"$R/rlpbs-exec" /opt/pbs/bin/qdel "$id"; rm -rf "$d"
echo "recorded $id: $(grep -E 'comment|run_count|Exit_status' "$out" | tr -s ' ' | tr '\n' ';')"
