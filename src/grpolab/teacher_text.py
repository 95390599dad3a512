"""The privileged teacher's text and the response tokens credit looks for (RLSD / GEAR / OPSD).

The text-and-tokens half of the self-teacher (docs/credit.md); the teacher *forward* that scores
responses under these prompts is :mod:`grpolab.rollout.teacher`. Nothing here imports torch at
module level, so :mod:`grpolab.config` checks a template with :func:`check_template` and builds a
:class:`TeacherPrompt` without loading a model library.

- :func:`check_template` -- a template's fields are ``{prompt}``, ``{privileged}``, ``{reference}``.
- :func:`build_teacher_prompts` -- plain-text privileged prompts, one per item.
- :func:`teacher_messages` -- the privileged conversation of a chat-template prompt.
- :class:`TeacherPrompt` -- how a run writes its teacher prompts (``credit.template`` & co.).
- :class:`CreditTokens` -- the token ids of GEAR's segment boundaries and of ``credit.span_end``.

The template text itself lives in :mod:`grpolab.utils.teacher_templates`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

from grpolab.utils.teacher_templates import (  # the template text lives there
    DEFAULT_CHAT_TEACHER_TEMPLATE,
    DEFAULT_SYSTEM_TEACHER_TEMPLATE,
    DEFAULT_TEACHER_TEMPLATE,
)

if TYPE_CHECKING:
    import torch

__all__ = [
    "DEFAULT_CHAT_TEACHER_TEMPLATE",
    "DEFAULT_SYSTEM_TEACHER_TEMPLATE",
    "DEFAULT_TEACHER_TEMPLATE",
    "PLACEMENTS",
    "TEMPLATE_FIELDS",
    "CreditTokens",
    "TeacherPrompt",
    "build_teacher_prompts",
    "check_template",
    "teacher_messages",
    "token_ids_containing",
]

TEMPLATE_FIELDS = ("prompt", "privileged", "reference")
PLACEMENTS = ("user", "system")


def check_template(template: str, *, need_prompt: bool = True) -> None:
    """Raise ``ValueError`` unless ``template`` has ``{privileged}`` or ``{reference}`` and (with
    ``need_prompt``, for templates that replace the question) ``{prompt}``."""
    import string

    try:
        names = {f for _, f, _, _ in string.Formatter().parse(template) if f is not None}
    except ValueError as e:
        raise ValueError(f"teacher template is not a valid format string ({e}); escape braces as '{{{{' / '}}}}'") from None
    unknown = names - set(TEMPLATE_FIELDS)
    if unknown:
        raise ValueError(
            f"teacher template uses unknown fields {sorted(unknown)}; allowed: "
            + ", ".join("{" + f + "}" for f in TEMPLATE_FIELDS)
        )
    if (need_prompt and "prompt" not in names) or not names & {"privileged", "reference"}:
        need = "{prompt} and {privileged}" if need_prompt else "{privileged}"
        raise ValueError(f"teacher template must contain {need} (or {{reference}}); got {template!r}")


def build_teacher_prompts(items: Sequence, template: str = DEFAULT_TEACHER_TEMPLATE) -> list[str]:
    """One teacher prompt text per task item (``prompt``, ``privileged``, ``reference`` attributes).

    ``{privileged}`` is the item's privileged context, or its reference answer when that is empty.
    """
    check_template(template)
    out = []
    for it in items:
        priv = it.privileged or it.reference
        out.append(template.format(prompt=it.prompt, privileged=priv, reference=it.reference))
    return out


def teacher_messages(messages: Sequence[dict], item, *, placement: str = "user",
                     template: str = DEFAULT_CHAT_TEACHER_TEMPLATE,
                     system_template: str = "{privileged}") -> list[dict]:
    """The privileged teacher conversation for a chat-template prompt, built at the message level.

    The student's conversation ``messages`` (as the policy sees it, system prompt included) is
    copied and the item's privileged context (or its reference answer) is added *inside* it, so
    that rendering it with the same chat template and ``add_generation_prompt=True`` ends with the
    same assistant header as the student's prompt: the sampled response tokens follow both
    prompts identically. Nothing is added after the last user turn, and nothing is repeated.

    Args:
        messages: ``[{"role", "content"}, ...]`` the student's prompt conversation.
        item: has ``privileged``, ``reference`` (a :class:`grpolab.tasks.TaskItem`).
        placement: ``"user"``: the last user turn becomes ``template`` with ``{prompt}`` = that
            turn's content; ``"system"``: ``system_template`` is appended to the first system
            message (after a blank line) or inserted as a new first system message.
        template, system_template: format strings over ``{prompt}``, ``{privileged}``, ``{reference}``.

    Returns:
        a new message list (the input is not modified).
    """
    if placement not in PLACEMENTS:
        raise ValueError(f"placement={placement!r}; choose one of {PLACEMENTS}")
    msgs = [dict(m) for m in messages]
    users = [i for i, m in enumerate(msgs) if m.get("role") == "user"]
    if not users:
        raise ValueError("the teacher conversation needs a user message to attach the privileged context to")
    priv = item.privileged or item.reference
    last = users[-1]
    if not isinstance(msgs[last].get("content"), str):
        raise ValueError(f"the last user message's content is {type(msgs[last].get('content')).__name__}, not "
                         "text: the teacher prompt supports text messages only (no multimodal content parts)")
    fields = dict(privileged=priv, reference=item.reference)
    if placement == "user":
        check_template(template)
        msgs[last]["content"] = template.format(prompt=msgs[last]["content"], **fields)
    else:
        check_template(system_template, need_prompt=False)
        note = system_template.format(prompt=msgs[last]["content"], **fields)
        if msgs[0].get("role") == "system":
            msgs[0]["content"] = (msgs[0]["content"] + "\n\n" + note) if msgs[0]["content"] else note
        else:
            msgs.insert(0, {"role": "system", "content": note})
    return msgs


@dataclass(frozen=True)
class TeacherPrompt:
    """How the privileged teacher's prompt is written: grpolab's credit step and the warm start's
    privileged rows both encode it here (``credit.template``, ``credit.chat_template``,
    ``credit.system_template``, ``credit.privileged_placement``:
    :meth:`grpolab.config.CreditConfig.teacher_prompt`).

    With a chat-template :class:`grpolab.tasks.PromptFormat` the privileged context goes into the
    student's conversation (:func:`teacher_messages`) and is rendered by the same template, so both
    prompts end with the same assistant header; with a plain-text format ``template`` wraps the
    prompt as the student saw it (system line, prompt template); with no format, ``template``
    wraps ``item.prompt``.
    """

    template: str = DEFAULT_TEACHER_TEMPLATE
    chat_template: str = DEFAULT_CHAT_TEACHER_TEMPLATE
    system_template: str = DEFAULT_SYSTEM_TEACHER_TEMPLATE
    placement: str = "user"

    def encode(self, items: Sequence, tokenizer, prompt_format=None) -> list[list[int]]:
        """Token ids of each item's privileged prompt (unpadded)."""
        from grpolab.rollout.prompts import encode_prompts

        fmt = prompt_format
        if fmt is None:
            return encode_prompts(tokenizer, build_teacher_prompts(items, self.template))
        if fmt.use_chat:
            return [fmt.encode_messages(teacher_messages(fmt.messages(it), it, placement=self.placement,
                                                         template=self.chat_template,
                                                         system_template=self.system_template), tokenizer)
                    for it in items]
        from types import SimpleNamespace

        shown = [SimpleNamespace(prompt=fmt.render(it, tokenizer), privileged=it.privileged, reference=it.reference)
                 for it in items]  # the plain prompt as the student saw it (template, system line)
        return encode_prompts(tokenizer, build_teacher_prompts(shown, self.template))

    def text(self, prompt_format=None) -> str:
        """The template in use for ``prompt_format`` (its fixed lines are what a leak repeats)."""
        if prompt_format is None or not prompt_format.use_chat:
            return self.template
        return self.chat_template if self.placement == "user" else self.system_template


def token_ids_containing(tokenizer, chars: str) -> torch.Tensor:
    """``[K]`` ids of every vocabulary token whose text contains one of ``chars`` (empty: none)."""
    import torch

    if not chars:
        return torch.zeros(0, dtype=torch.long)
    ids = [i for i in range(len(tokenizer)) if any(c in tokenizer.decode([i]) for c in chars)]
    return torch.tensor(ids, dtype=torch.long)


class CreditTokens:
    """The tokens a credit method looks for in the responses, found once per tokenizer.

    ``boundaries``: characters whose tokens end a GEAR segment (``credit.gear_boundaries``);
    ``span_end``: the text whose first token ends the reweighted span (``credit.span_end``).
    grpolab's trainer, the TRL adapter and the verl extension all build their masks here.
    """

    def __init__(self, tokenizer, *, boundaries: str, span_end: str = "") -> None:
        self.boundary_ids = token_ids_containing(tokenizer, boundaries)
        self.span_end_ids = token_ids_containing(tokenizer, span_end)

    def masks(self, response_ids: torch.Tensor,
              response_mask: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """``(boundary_mask, span_mask)``, each ``[B,T]`` bool or None when its setting is empty.

        ``boundary_mask``: the response token ends a GEAR segment. ``span_mask``: the token comes
        before the first valid token containing ``span_end`` (the span that is reweighted).
        """
        import torch

        device = response_ids.device
        boundary = span = None
        if len(self.boundary_ids):
            boundary = torch.isin(response_ids, self.boundary_ids.to(device))
        if len(self.span_end_ids):
            hit = torch.isin(response_ids, self.span_end_ids.to(device)) & response_mask.bool()
            span = hit.long().cumsum(-1) == 0
        return boundary, span
