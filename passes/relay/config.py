"""The pass's options from the PassContext: ``PassContext(config={"relay.eqsat.<option>": ...})``.

This TVM (0.16, C++ ``PassConfigManager``) rejects unregistered config keys and offers no Python
API to register them. Importing this module therefore wraps ``tvm.transform.PassContext.__init__``:
keys starting with :data:`CONFIG_PREFIX` are taken out of ``config`` before the C++ constructor
sees them and kept in a side table keyed by the context object; the pass reads them back with
:func:`eqsat_config`. ``PassContext.list_configs()`` also lists them (IntImm for int/bool options,
runtime.String otherwise), so ``tvmc compile --pass-config relay.eqsat.budget=8`` works. Importing
``relay_eqsat.passes.relay`` (``from relay_eqsat.passes import EqSatPass`` does) installs the hook;
``PassContext.current().config`` does not show these keys.

:func:`resolve_options`: constructor options over PassContext config over :data:`DEFAULT_OPTIONS`,
each validated through the one options schema (:mod:`relay_eqsat.options`).
"""
from __future__ import annotations

import weakref
from typing import Any, Mapping

import tvm

from relay_eqsat.options import DEFAULTS, OPTIONS, set_hook, validate



CONFIG_PREFIX = "relay.eqsat."

#: option -> default value: every option of the pass, from the schema (relay_eqsat.options:
#: the optimizer's options, verify, check_runtime, calibrate, the time limits, min_gain).
DEFAULT_OPTIONS: dict[str, Any] = dict(DEFAULTS)


_CONFIG: dict[int, dict[str, Any]] = {}


def _ctx_key(ctx) -> int:
    return int(ctx.handle.value)


def _install_config_hook() -> None:
    cls = tvm.transform.PassContext
    if getattr(cls.__init__, "_relay_eqsat_hook", False):
        return
    original = cls.__init__

    def __init__(self, *args, **kwargs):
        # config is the 5th positional parameter of PassContext.__init__
        config = kwargs.get("config", args[4] if len(args) > 4 else None)
        ours = {}
        if config:
            config = dict(config)
            for k in [k for k in config if str(k).startswith(CONFIG_PREFIX)]:
                ours[k[len(CONFIG_PREFIX):]] = config.pop(k)
            if len(args) > 4:
                args = args[:4] + (config,) + args[5:]
            else:
                kwargs["config"] = config
        original(self, *args, **kwargs)
        if ours:
            key = _ctx_key(self)
            _CONFIG[key] = ours
            # the wrapper keeps the C++ context alive, so the key is not reused before this runs
            weakref.finalize(self, _CONFIG.pop, key, None)

    __init__._relay_eqsat_hook = True
    __init__.__wrapped__ = original
    __init__.__doc__ = original.__doc__
    cls.__init__ = __init__

    # list them too, so tools that validate keys against list_configs() (tvmc
    # --pass-config) accept them; tvmc parses IntImm (ints, true/false) and strings
    original_list = cls.list_configs

    def list_configs():
        configs = dict(original_list())
        for name, option in OPTIONS.items():
            typ = "IntImm" if option.type in (int, bool) else "runtime.String"
            configs[CONFIG_PREFIX + name] = {"type": typ}
        return configs

    list_configs.__doc__ = original_list.__doc__
    cls.list_configs = staticmethod(list_configs)


_install_config_hook()


def eqsat_config(ctx=None) -> dict[str, Any]:
    """The ``relay.eqsat.*`` options of a PassContext (default: the current
    one), without the prefix."""
    ctx = ctx if ctx is not None else tvm.transform.PassContext.current()
    return dict(_CONFIG.get(_ctx_key(ctx), {}))


def _plain(value: Any) -> Any:
    """A PassContext config value as a Python one (IntImm/FloatImm -> number, String -> str)."""
    if isinstance(value, tvm.runtime.String):
        return str(value)
    if isinstance(value, (tvm.tir.IntImm, tvm.tir.FloatImm)):
        return value.value
    return value


def _check_target(target: str) -> str:
    """The schema's hook for ``target``: the string, if TVM can make a Target of it."""
    try:
        tvm.target.Target(target)
    except Exception as e:  # noqa: BLE001 - TVM raises ValueError or TVMError
        text = str(e).strip()
        raise ValueError(f"{target!r} is not a TVM target ({text.splitlines()[-1] if text else type(e).__name__})"
                         ) from None
    return target


set_hook("target", _check_target)


def resolve_options(explicit: Mapping[str, Any], ctx=None) -> dict[str, Any]:
    """Constructor options over PassContext config over defaults, each
    validated through the schema (:mod:`relay_eqsat.options`); ValueError
    naming a bad option or value."""
    opts = dict(DEFAULT_OPTIONS)
    config = {name: _plain(value) for name, value in eqsat_config(ctx).items()}
    opts.update(validate(config, what="PassContext option relay.eqsat"))
    opts.update(validate(explicit, what="EqSatPass option"))
    return opts
