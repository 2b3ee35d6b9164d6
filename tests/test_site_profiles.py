"""The ALCF profiles' settings that are restartlab's own mechanisms: each local rank's device on a
Polaris node (GPUs in reverse, as ALCF's set_affinity_gpu_polaris.sh), the rendezvous host's
network suffix (Aurora's .hsn names), PMIx on mpiexec's own line, and what each profile renders.
The settings themselves (each with its source at argonne-lcf/user-guides 7d04a3f9) are read on
the rendered scripts in tests/data/golden/{aurora,polaris}-agpt2b.pbs.sh. Nothing here runs on a
GPU, PALS or ALCF's server: unverified there."""
import os

import pytest

from restartlab import scenario
from restartlab.job import render
from restartlab.launchers import master_addr
from trainer.dist import device_index

SCEN = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scenarios")


def test_each_local_rank_on_a_4_gpu_polaris_node_takes_the_gpu_alcf_maps_it_to():
    # set_affinity_gpu_polaris.sh: gpu=$((num_gpus - 1 - PMI_LOCAL_RANK % num_gpus)) (using-gpus.md:25-33)
    assert [device_index(r, 4, "reverse") for r in range(4)] == [3, 2, 1, 0]
    assert [device_index(r, 4, "local") for r in range(4)] == [0, 1, 2, 3]
    assert [device_index(r, 4, "reverse") for r in range(8)] == [3, 2, 1, 0, 3, 2, 1, 0]  # 8 ranks on 4 GPUs
    assert device_index(2, 0, "reverse") == 2  # no device count known: the local rank, as before


def _load(name, *sets):
    return scenario.load(os.path.join(SCEN, name), ["job.account=P1", *sets])


def test_the_polaris_profile_asks_for_reversed_gpus_in_the_trainer_and_the_smoke_job():
    sc = _load("polaris/agpt2b.yaml")
    text, _ = render.render(sc, None, "/expt/x")
    assert text.count("--device-order reverse") == 3  # each phase's trainer
    smoke, _ = render.render_smoke(sc, None, "/expt/x")
    assert "--device-order reverse" in smoke
    assert "#PBS -l select=2:ncpus=64:mpiprocs=4:system=polaris" in text


@pytest.mark.parametrize("name", ["aurora/agpt2b.yaml", "agpt2b.yaml"])
def test_pmix_goes_on_mpiexecs_line_not_to_the_ranks(name):
    text, ctx = render.render(_load(name), None, "/expt/x")
    argv = ctx.phases[1].spec.argv()
    assert argv[:2] == ["mpiexec", "--pmi=pmix"], argv[:6]
    assert not any("PALS_PMI" in a or "FI_PROVIDER" in a for a in argv), argv


def test_the_rendezvous_host_gets_the_sites_network_suffix_unless_one_is_exported():
    assert master_addr("x1921c0s3b0n0", ".hsn.cm.aurora.alcf.anl.gov", env={}) == \
        "x1921c0s3b0n0.hsn.cm.aurora.alcf.anl.gov"
    assert master_addr("h", ".hsn.x", env={"MASTER_ADDR": "10.1.2.3"}) == "10.1.2.3"
    # rank 0 off the first host (spares, shrink): its name from the node file is whole
    assert master_addr("x4000c2s6b0n0.hostmgmt2000.cm.aurora.alcf.anl.gov", ".hsn.cm.aurora.alcf.anl.gov", env={}) == \
        "x4000c2s6b0n0.hsn.cm.aurora.alcf.anl.gov"
    assert master_addr("rlpbs-n1.local", "", env={}) == "rlpbs-n1.local"  # no suffix: as it is
    # the smoke job's ranks meet where the experiment's will
    smoke, _ = render.render_smoke(_load("aurora/agpt2b.yaml"), None, "/x")
    assert "--master-suffix .hsn.cm.aurora.alcf.anl.gov" in smoke
    assert "--master-suffix .hsn.cm.aurora.alcf.anl.gov" in render.render(_load("aurora/agpt2b.yaml"), None, "/x")[0]
    assert "--master-suffix" not in render.render(_load("agpt2b.yaml"), None, "/x")[0]  # Sunspot: none known
