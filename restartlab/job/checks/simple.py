"""The short checks: the account a site requires, the fan-out tool, the most node-hours the job
can be charged."""
from .. import sizing
from ...contracts.units import hms
from . import ERROR, OK, Check


class AccountCheck(Check):
    def run(self):
        j, site = self.sc.job, self.sc.site
        if site.account_required and not j.account:
            self.add(ERROR, "account", f"{self.key('job', 'account')}: {self.site} charges every job to a project "
                     "and rejects one without it: set job.account (or --set job.account=PROJECT; make: ACCOUNT=PROJECT)"
                     + (f"; {site.docs}" if site.docs else ""))
        elif "{account}" in self.sc.expt_root and not j.account:
            self.add(ERROR, "account", f"{self.key('expt_root')}: names {{account}}, but job.account is not set")
        elif j.account:
            self.add(OK, "account", f"job.account {j.account}")


class FanoutCheck(Check):
    def run(self):
        """The tool the injector and the killers reach every node with."""
        if not self.sched.fanout_tool:
            return  # a scheduler without one (local): nothing to check
        path = self.sched.fanout_path(self.env)
        if path:
            self.add(OK, "fanout", path)
        else:
            self.add(ERROR, "fanout", f"{self.sched.fanout_tool} is not found ({self.sched.fanout_where}): the injector "
                     "cannot reach the job's nodes")


class CostCheck(Check):
    def run(self):
        j = self.sc.job
        if not self.sched.has_queue:
            return
        jobs = 1 + self.sc.relaunch.chain
        self.add(OK, "cost", f"at most {sizing.node_hours(self.sc):.1f} node-hours: {j.nodes + j.spare_nodes} "
                 f"node(s) x {hms(j.walltime)} walltime x {jobs} job(s) (phases "
                 f"{', '.join(p.name for p in self.sc.phases)} run one after another in each)")
