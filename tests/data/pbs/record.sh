#!/bin/bash
# Records tests/data/pbs/qstat-f-x.txt from a real OpenPBS server (the recipe's cluster, started):
# one `qstat -f -x` of jobs in every state restartlab reads (running, held, finished 0, cancelled
# by qdel while running: 271, killed at walltime: -29) and an unknown id (qstat exits 153).
#   PATH=<dir with qsub/qstat/qdel, e.g. tests/pbs_cluster.py's bin dir>:$PATH tests/data/pbs/record.sh
set -euo pipefail
out=$(cd "$(dirname "$0")" && pwd)/qstat-f-x.txt
d=$(mktemp -d /tmp/rl-pbs-record.XXXXXX); chmod 755 "$d"; chown pbsuser: "$d"; cd "$d"
u() { RLPBS_AS_USER=pbsuser "$@"; }
printf '#!/bin/bash\n#PBS -l walltime=60\ntrue\n' > done.sh
printf '#!/bin/bash\n#PBS -l walltime=300\nsleep 300\n' > long.sh
printf '#!/bin/bash\n#PBS -l walltime=4\nsleep 300\n' > wall.sh
done_id=$(u qsub done.sh); run_id=$(u qsub long.sh); held_id=$(u qsub -h long.sh)
del_id=$(u qsub long.sh); wall_id=$(u qsub wall.sh)
state() { qstat -f -x "$1" | sed -n 's/^ *job_state = //p'; }
until [ "$(state "$del_id")" = R ] && [ "$(state "$run_id")" = R ]; do sleep 0.5; done
qdel "$del_id"
until [ "$(state "$del_id")" = F ] && [ "$(state "$wall_id")" = F ] && [ "$(state "$done_id")" = F ]; do sleep 1; done
rc=0; qstat -f -x "$run_id" "$held_id" "$done_id" "$del_id" "$wall_id" 999999."${run_id#*.}" > "$out" || rc=$?
echo "qstat exit status $rc; ids: running $run_id held $held_id finished $done_id qdel $del_id walltime $wall_id"
qdel "$run_id" "$held_id"
rm -rf "$d"
