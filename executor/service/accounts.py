"""A fleet's money: what a job costs at the fleet's prices, whether a team's budget allows it, and what its GPU
time cost (fleet.ledger) — the executor service's budget and usage use cases, over the server's auth file
(common.identity: [[team]] budgets, [prices])."""

from __future__ import annotations

from tunefleet.v1 import executor_pb2, plan_pb2

from common.errors import DeniedError
from common.identity import Directory, Identities, Identity, Role
from contract.errors import PlanError, SpecError
from executor.service import moves, usage
from fleet.errors import OverBudgetError
from fleet.jobs import now_ms
from fleet.ledger import Ledger, month_of
from planner.catalog import Catalog

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

    def check_budget(self, who: Identity, cost_high_usd: float, override: bool) -> str:
        """OverBudgetError when the job would take its team past its monthly budget: spent this month, plus what its
        open jobs may still spend, plus this job's predicted upper bound. An admin may override (audited); the
        note the audit records."""
        if override:
            who.require(Role.ADMIN, "override_budget")
            return "; over the team's budget, admin override"
        policy = self.directory().teams.get(who.team)
        if policy is None or policy.monthly_budget_usd is None:
            return ""
        month = month_of(now_ms())
        if cost_high_usd <= 0:
            raise OverBudgetError(f"team {who.team} has a budget and this job has no price: its plan predicts no "
                                  "duration, or its GPU class has none on record; plan it with 'tunefleet recommend "
                                  "--save-plan', or ask an admin to set the class's price ([prices] in the auth file)")
        spent, committed = self.ledger.spent_usd(who.team, month), self.ledger.committed_usd(who.team)
        total = spent + committed + cost_high_usd
        if total > policy.monthly_budget_usd:
            raise OverBudgetError(
                f"team {who.team}: spent ${spent:,.2f} + committed ${committed:,.2f} + this job ${cost_high_usd:,.2f} "
                f"(the upper end of its predicted cost) = ${total:,.2f}, over its ${policy.monthly_budget_usd:,.2f} "
                f"budget for {month}; cancel queued jobs, wait for next month, or ask an admin to submit it with "
                "override_budget")
        return ""

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
        rows, total = usage.aggregate(holds, request.group_by or executor_pb2.USAGE_GROUPING_JOB)
        response = executor_pb2.UsageResponse(rows=rows, total=total)
        if team:
            policy = self.directory().teams.get(team)
            response.month_spent_usd = self.ledger.spent_usd(team, month_of(now_ms()))
            response.month_committed_usd = self.ledger.committed_usd(team)
            response.month_budget_usd = (policy.monthly_budget_usd or 0.0) if policy else 0.0
        return response
