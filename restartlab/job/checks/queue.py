"""The job's shape against the server's queues (job.queue, or job.queue: auto's choice)."""
from .. import queues
from ...contracts.units import hms
from ...schedulers.base import SchedulerError, ToolMissing
from . import ERROR, OK, WARNING, Check


class QueueCheck(Check):
    """The scenario's queue (or the server's default), or, for job.queue: auto, the one that takes
    the job (the preflight's chosen_queue)."""

    def shape(self) -> queues.Shape:
        j = self.sc.job
        nodes = j.nodes + j.spare_nodes
        asked = f"{nodes} node(s)" + (f" ({j.nodes} + {j.spare_nodes} spare)" if j.spare_nodes else "")
        return queues.Shape(nodes, j.walltime, asked, at_once=2 if self.sc.relaunch.chain else 1,
                            user=queues.user_name(self.env), wall_at=self.where(("job", "walltime")))

    def run(self):
        if not self.sched.has_queue:
            return
        j, at, s = self.sc.job, self.key("job", "queue"), self.shape()
        auto = j.queue == queues.AUTO
        try:
            qs = self.sched.server_queues(self.pf.run, s.user)
        except ToolMissing as e:
            if auto:
                self.add(ERROR, "queue", f"{at}: auto needs the server's queues, and {e} (not a {self.sched.name} "
                         "login node?): name a queue")
            else:
                self.add(WARNING, "queue", f"{e}: the queue's limits were not checked (not a {self.sched.name} "
                         "login node?)")
            return
        except SchedulerError as e:
            self.add(ERROR, "queue", f"{at}: the server cannot be asked about its queues: {' '.join(str(e).split())}")
            return
        if qs is None:
            self.add(WARNING, "queue", f"the {self.sched.name} scheduler cannot list its queues: the queue was not "
                     "checked")
            return
        if self.pf.ignore_jobs:
            qs.mine = {q: [x for x in ids if x.split(".")[0] not in self.pf.ignore_jobs] for q, ids in qs.mine.items()}
        for note in qs.source.split("; ")[1:]:
            self.add(WARNING, "queue", f"{note}: not checked")
        avoid = j.queue_avoid
        if auto:
            name = queues.pick(qs, s, avoid)
            if name is None:
                self.add(ERROR, "queue", f"{at}: auto: {queues.summary(qs, s, avoid)}")
                return
            self.pf.chosen_queue = name
            others = [n for n in queues.takers(qs, s, avoid) if n != name]
            self.add(OK, "queue", f"job.queue auto: {name}, the first of the queues here that take {s.text()}"
                     + (f" (also: {', '.join(others)})" if others else "") + " (the choice goes into the job script)")
        else:
            name = j.queue or qs.default
            if not name:
                self.add(WARNING, "queue", f"{at}: no queue given and the server names no default queue")
                return
            if name not in qs.queues:
                self.add(ERROR, "queue", f"{at}: queue {name!r} does not exist on this server ({qs.source.split(';')[0]}: "
                         f"{', '.join(sorted(qs.queues)) or 'no queues'}): name one of its queues, or job.queue: "
                         f"{queues.AUTO}")
                return
            bad = queues.refusals(qs, name, s)
            for b in bad:
                self.add(ERROR, "queue", f"{at}: queue {name}: {b} ({qs.queues[name].source})")
            if bad:
                self.add(ERROR, "queue", f"{at}: {queues.summary(qs, s, avoid)}")
                return
        for w in queues.waits(qs, name, s):
            self.add(WARNING, "queue", f"{at}: queue {name}: {w} ({qs.queues[name].source})")
        q = qs.queues[name]
        lim = ", ".join(x for x in (
            f"nodes {q.min_nodes or 1}-{q.max_nodes}" if q.max_nodes else
            (f"nodes from {q.min_nodes}" if q.min_nodes else ""),
            f"walltime up to {hms(q.max_walltime)}" if q.max_walltime else "",
            f"{q.user_queued} job(s) per user" if q.user_queued is not None else "",
            f"routes to {', '.join(q.route_to)}" if q.route_to else "") if x)
        self.add(OK, "queue", f"queue {name} takes {s.asked} for {hms(s.walltime)}" + (f" ({lim})" if lim else ""))
