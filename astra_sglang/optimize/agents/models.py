"""A model (and reasoning effort) per role: the planner can think longer on a stronger model while the coder
drafts on a faster one, the reflector and the summarizer on a cheap one. Every role's model shares the run's
meter, so the budget is the run's whatever the models are; a role with no model of its own uses the run's.
"""
from __future__ import annotations

from typing import get_args

from astra_sglang.optimize.agents.meter import UsageMeter
from astra_sglang.optimize.agents.protocols import Model
from astra_sglang.optimize.records import LLMConfig, Role

ROLES: tuple[str, ...] = get_args(Role)


class Models:
    """role -> Model, all sharing one UsageMeter."""

    def __init__(self, default: Model, by_role: dict[str, Model] | None = None):
        self.default = default
        self.by_role = dict(by_role or {})
        unknown = sorted(set(self.by_role) - set(ROLES))
        if unknown:
            raise ValueError(f"unknown roles {unknown}; roles: {', '.join(ROLES)}")
        self.meter: UsageMeter = default.meter
        for model in self.by_role.values():
            model.meter = self.meter

    def __call__(self, role: str) -> Model:
        return self.by_role.get(role, self.default)

    def describe(self) -> str:
        """One line for the run's first echo: which model plays which role."""
        parts = [f"{role} {m.name}" for role, m in self.by_role.items() if m is not self.default]
        return self.default.name + (f" ({', '.join(parts)})" if parts else "")

    @classmethod
    def of(cls, model: "Model | Models | None") -> "Models | None":
        return model if isinstance(model, Models) or model is None else cls(model)

    @classmethod
    def from_config(cls, config: LLMConfig, sleep=None) -> "Models":
        """One OpenAI-compatible client per distinct role config, all on the run's meter (which checks that every
        model has a price when the run has a dollar budget)."""
        from astra_sglang.optimize.agents.llm import OpenAIModel, meter_for

        meter = meter_for(config)
        kwargs = {"sleep": sleep} if sleep is not None else {}
        default = OpenAIModel(config, meter=meter, **kwargs)
        clients: dict[str, Model] = {}
        by_role: dict[str, Model] = {}
        for role in config.roles:
            own = config.for_role(role)
            key = own.model_dump_json(exclude={"roles", "api_key"})
            if key == config.model_dump_json(exclude={"roles", "api_key"}):
                continue
            by_role[role] = clients.setdefault(key, OpenAIModel(own, meter=meter, **kwargs))
        return cls(default, by_role)
