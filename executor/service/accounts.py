"""A fleet's money: what a job costs at the fleet's prices, whether a team's budget allows it, and what its GPU
time cost (fleet.ledger) — the executor service's budget and usage use cases, over the server's auth file
(common.identity: [[team]] budgets, [prices])."""

from __future__ import annotations

import structlog
from tunefleet.v1 import executor_pb2, plan_pb2

from common.errors import DeniedError
from common.identity import Directory, Identities, Identity, Role
from contract.errors import PlanError, SpecError
from executor.service import moves, pricing, scoping, usage
from fleet import budget
from fleet.budget import BudgetRule
from fleet.errors import OverBudgetError
from fleet.jobs import now_ms
from fleet.ledger import Ledger, month_of
from planner.catalog import Catalog

log = structlog.get_logger("executor.service.accounts")
NO_DIRECTORY = Directory({}, {}, {})


class Accounts:
    def __init__(self, ledger: Ledger, catalog: Catalog) -> None:
        self.ledger = ledger
        self.catalog = catalog
        self.identities: Identities | None = None  # the server's auth file: team budgets and fleet prices
        self._priced: tuple[tuple[tuple[str, float], ...], Catalog] | None = None  # the catalog at those prices

    def directory(self) -> Directory:
        return self.identities.directory if self.identities is not None else NO_DIRECTORY

    def price(self, gpu_class: str, plan: plan_pb2.Plan, gpus_total: int) -> float:
        """USD per GPU-hour of a job of this class: the fleet's own price (its auth file's [prices]), else the
        catalog's public on-demand one, else what the plan was priced at; 0 when nothing says."""
        fleet_price = self.directory().prices_usd_per_gpu_hour.get(gpu_class)
        if fleet_price is not None:
            return fleet_price
        try:
            catalog_price = self.catalog.gpu(gpu_class).on_demand_hourly_usd
        except SpecError:
            catalog_price = 0.0
        return catalog_price or plan.prediction.estimate.hourly_usd / gpus_total

    def owning_team(self, who: Identity, requested: str) -> str:
        """The team a Submit's job belongs to and is charged to: the caller's own, or (admins only) the team the
        request names, which must be one the auth file knows."""
        if not requested or requested == who.team:
            return who.team
        who.require(Role.ADMIN, "Submit for another team (team)")
        directory = self.directory()
        known = sorted(set(directory.teams) | {i.team for i in directory.identities.values()})
        if requested not in known:
            raise PlanError("team", f"{requested!r} is no team of the fleet's auth file; it knows "
                                    f"{', '.join(known) or 'no teams'}")
        return requested

    def job_price(self, plan: plan_pb2.Plan, gpu_class: str, gpus_total: int) -> pricing.JobPrice:
        """The job's prediction, commitment and timeout, from the fleet's own prediction and its class's hold model."""
        hold = self.ledger.hold_model(gpu_class)
        return pricing.job_price(plan, self.priced_catalog(), self.price(gpu_class, plan, gpus_total), gpus_total,
                                 hold)

    def team_store(self, team: str) -> str:
        """The team's default store (its [[team]] table's store), or "" for none."""
        policy = self.directory().teams.get(team)
        return policy.store if policy is not None else ""

    def budget_rule(self, who: Identity, team: str, cost_high_usd: float, override: bool) -> tuple[BudgetRule | None,
                                                                                                 str]:
        """The budget a job of `team` must fit (None: none, or an admin's override), and what the audit says of it.
        OverBudgetError when the team has a budget and the job no price to hold it to."""
        policy = self.directory().teams.get(team)
        budget = None if policy is None else policy.monthly_budget_usd
        if override:
            who.require(Role.ADMIN, "override_budget")
            return None, (f"; admin override of team {team}'s ${budget:,.2f} budget" if budget is not None
                          else f"; admin override (team {team} has no budget)")
        if budget is None:
            return None, ""
        if cost_high_usd <= 0:
            raise OverBudgetError(f"team {team} has a budget and this job has no price: its plan predicts no "
                                  "duration, or its GPU class has none on record; plan it with 'tunefleet recommend "
                                  "--save-plan', or ask an admin to set the class's price ([prices] in the auth file)")
        return BudgetRule(team, budget), ""

    def stop_over_budget(self) -> list[str]:
        """Ask every running job that passed its budgeted hold, of a team whose month now passes its budget, to
        checkpoint and stop (fleet.budget); the ids asked."""
        stopped, at_ms = [], now_ms()
        for name, team in sorted(self.directory().teams.items()):
            if team.monthly_budget_usd is None:
                continue
            for job_id, why in budget.over_budget_running(self.ledger.redis, BudgetRule(name, team.monthly_budget_usd),
                                                          at_ms):
                if budget.ask_to_stop(self.ledger.redis, job_id, why):
                    log.warning("job.budget_stop", job_id=job_id, team=name, reason=why)
                    stopped.append(job_id)
        return stopped

    def priced_catalog(self) -> Catalog:
        prices = self.directory().prices_usd_per_gpu_hour
        key = tuple(sorted(prices.items()))
        if self._priced is None or self._priced[0] != key:
            self._priced = (key, moves.priced(self.catalog, prices))
        return self._priced[1]

    def usage(self, request: executor_pb2.UsageRequest,
              who: Identity) -> executor_pb2.UsageResponse:
        """Charged GPU time and its cost since `since_days`, grouped; a team's month against its budget."""
        team = request.team or ("" if who.role is Role.ADMIN else who.team)
        if team and not who.sees(team):
            raise DeniedError(f"another team's usage needs the admin role; {who.principal} is in team {who.team}")
        if request.since_days > usage.MAX_SINCE_DAYS:
            raise PlanError("since_days", f"is {request.since_days}; at most {usage.MAX_SINCE_DAYS}")
        since_ms = now_ms() - (request.since_days or usage.DEFAULT_SINCE_DAYS) * 86_400_000
        holds = [h for h in self.ledger.holds(since_ms, usage.MAX_HOLDS_READ) if not team or h.get("team") == team]
        group_by = request.group_by or executor_pb2.USAGE_GROUPING_JOB
        rows, total = usage.aggregate(holds, group_by)
        if group_by == executor_pb2.USAGE_GROUPING_JOB:
            for row in rows:
                row.key = scoping.shown(row.key, who)
        response = executor_pb2.UsageResponse(rows=rows, total=total)
        if team:
            policy = self.directory().teams.get(team)
            response.month_spent_usd = self.ledger.spent_usd(team, month_of(now_ms()))
            response.month_committed_usd = budget.exposure(self.ledger.redis, team, now_ms()).committed_usd
            response.month_budget_usd = (policy.monthly_budget_usd or 0.0) if policy else 0.0
        return response
