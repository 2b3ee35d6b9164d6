"""The bundled DCP trainer (installed as `restartlab.trainer`; run with `python -m restartlab.trainer`).

FSDP2 (optionally 2-D with tensor parallel) over synthetic data that is a pure function of
(seed, step, data-parallel rank), with sync or async Distributed Checkpoint saves and bit-exact
auto-resume. The only module here that knows about checkpoint files is `checkpoint.py`.
"""
