"""The scenario's secrets: launch.env variables whose values are credentials.

They reach the ranks through the job's environment, by name. They are never written into a file
restartlab makes."""
import os
import re
from typing import Dict, List, Mapping, Optional

from ..contracts.scenario_record import Scenario
from .source import ScenarioError


SECRET_NAME = re.compile(r"(^|_)(KEY|TOKEN|SECRET|PASSWORD)$")  # WANDB_API_KEY, HF_TOKEN, ...


def is_secret(name: str) -> bool:
    """True for a launch.env variable whose value is a credential.

    Such a value reaches the ranks through the job's environment, by name. It is never written into
    a file restartlab makes: job script, scenario copy, report."""
    return bool(SECRET_NAME.search(name.upper()))


def secret_names(sc: Scenario) -> List[str]:
    return sorted(k for k in sc.launch.env if is_secret(k))


def reference(name: str) -> str:
    """What a file says instead of a secret's value: `${NAME}` (also how a scenario asks for the
    value from the environment restartlab runs in)."""
    return "${" + name + "}"


def secret_values(sc: Scenario, environ: Optional[Mapping[str, str]] = None) -> Dict[str, str]:
    """{name: value} of the scenario's secrets, for the job's environment.

    A value written as `${NAME}` is taken from `environ`, which defaults to ours. ScenarioError when
    it is not set there."""
    environ = os.environ if environ is None else environ
    out = {}
    for k in secret_names(sc):
        v = str(sc.launch.env[k])
        if v == reference(k):
            if k not in environ:
                raise ScenarioError(f"{sc.source or 'scenario'}: launch.env.{k}: {v} asks for the value "
                                    f"from the environment, and {k} is not set here")
            v = environ[k]
        out[k] = v
    return out
