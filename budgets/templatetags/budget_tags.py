"""Numbers as the budget pages write them: shares as percents, GPU-hours (usage ratios: `allot`'s `ratio`)."""

from decimal import Decimal

from django import template

register = template.Library()


@register.filter
def pct(value) -> str:
    """A share: `55 %`, `60.87 %`; `—` for none."""
    if value is None or value == "":
        return "—"
    value = Decimal(str(value)).quantize(Decimal("0.01"))
    return f"{value.normalize():f} %" if value == value.to_integral() else f"{value:f} %"


@register.filter
def ratio_class(value) -> str:
    if value is None:
        return "ratio-none"
    if value > 1.2:
        return "ratio-over"
    if value < 0.8:
        return "ratio-under"
    return "ratio-even"


@register.filter
def gpuh(value) -> str:
    """GPU-hours, rounded: `19293`; `0` for nothing."""
    if value is None:
        return "—"
    return f"{value:.0f}"


@register.filter
def seconds(value) -> str:
    """A wait: `45 s`, `12 min`, `3.5 h`, `2.1 d`; `—` for none."""
    if value is None or value == "":
        return "—"
    value = float(value)
    if value < 60:
        return f"{value:.0f} s"
    if value < 3600:
        return f"{value / 60:.0f} min"
    if value < 2 * 86400:
        return f"{value / 3600:.1f} h"
    return f"{value / 86400:.1f} d"
