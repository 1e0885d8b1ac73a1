"""A griffe extension for the API pages: an attrs class shows the ``__init__`` attrs writes.

griffe reads the source without importing it and knows dataclasses but not attrs, so an
``@attrs.frozen`` record was rendered with no way to build it (``ImageContent(data,
mime_type)`` appeared nowhere). This extension gives such a class the signature attrs
generates from its annotated fields: in order, ``init=False`` fields left out,
``default=`` and ``factory=`` as defaults, ``kw_only`` and ``alias`` honoured, a leading
underscore dropped. Fields inherited from another attrs class are not collected: no
public attrs class of this package subclasses one.

mkdocs.yml loads it through the python handler's ``extensions`` option.
"""

from __future__ import annotations

from typing import Any

import griffe

_DECORATORS = frozenset({"attrs.frozen", "attrs.define", "attrs.mutable", "attr.s", "attr.attrs"})
_FIELD = frozenset({"attrs.field", "attr.ib", "attr.attrib"})


def _keywords(expression: object) -> dict[str, Any]:
    """The keyword arguments of a call expression (``{}`` for anything else)."""
    if not isinstance(expression, griffe.ExprCall):
        return {}
    return {
        argument.name: argument.value
        for argument in expression.arguments
        if isinstance(argument, griffe.ExprKeyword)
    }


def _attrs_decorator(cls: griffe.Class) -> griffe.Decorator | None:
    for decorator in cls.decorators:
        if decorator.callable_path in _DECORATORS:
            return decorator
    return None


def _parameter(member: griffe.Attribute, kw_only: bool) -> griffe.Parameter | None:
    """The ``__init__`` parameter of one field, or ``None`` for a field attrs leaves out."""
    value = member.value
    is_field = isinstance(value, griffe.ExprCall) and value.function.canonical_path in _FIELD
    options = _keywords(value) if is_field else {}
    if str(options.get("init")) == "False":
        return None
    if "factory" in options:
        default: str | griffe.Expr | None = griffe.ExprCall(options["factory"], [])
    else:
        default = options.get("default") if is_field else value
    alias = options.get("alias")
    name = str(alias).strip("'\"") if alias is not None else member.name.lstrip("_")
    keyword_only = kw_only or str(options.get("kw_only")) == "True"
    kind = griffe.ParameterKind.keyword_only if keyword_only else None
    return griffe.Parameter(
        name,
        annotation=member.annotation,
        kind=kind or griffe.ParameterKind.positional_or_keyword,
        default=default,
    )


class AttrsSignatures(griffe.Extension):
    """Adds the attrs-generated ``__init__`` to each attrs class griffe loads."""

    def on_class_members(self, *, cls: griffe.Class, **kwargs: Any) -> None:
        decorator = _attrs_decorator(cls)
        if decorator is None or "__init__" in cls.members:
            return
        kw_only = str(_keywords(decorator.value).get("kw_only")) == "True"
        fields = [
            member
            for member in cls.members.values()
            if isinstance(member, griffe.Attribute)
            and member.annotation is not None
            and "instance-attribute" in member.labels
        ]
        parameters = [_parameter(field, kw_only) for field in fields]
        init = griffe.Function(
            "__init__",
            parent=cls,
            parameters=griffe.Parameters(
                griffe.Parameter("self", kind=griffe.ParameterKind.positional_or_keyword),
                *[parameter for parameter in parameters if parameter is not None],
            ),
            returns="None",
        )
        cls.set_member("__init__", init)
