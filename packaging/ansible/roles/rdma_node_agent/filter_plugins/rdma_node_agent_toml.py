"""The `rdma_node_agent_toml` filter: the agent's config (a dict) as TOML.

The role renders the whole config from role variables, so every key of
/etc/rdma-node-agent/config.toml can be set, in any table, without a table
being defined twice. Plain Python (no toml library on the controller): tables
as [a] and [a.b], lists of tables as [[a.b]], strings as TOML basic strings. A
None value leaves its key out (the agent's built-in default applies).
"""

import json
import math
import re

BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def _key(k):
    k = str(k)
    return k if BARE_KEY.match(k) else json.dumps(k, ensure_ascii=False)


def _is_table(v):
    return isinstance(v, dict)


def _is_table_list(v):
    return isinstance(v, list) and len(v) > 0 and all(isinstance(i, dict) for i in v)


def _value(v, where):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return repr(v)
    if isinstance(v, str):
        # A JSON string is a TOML basic string: the same escapes.
        return json.dumps(v, ensure_ascii=False)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_value(i, where) for i in v) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(
            "%s = %s" % (_key(k), _value(i, where)) for k, i in v.items() if i is not None
        ) + " }"
    raise ValueError("rdma_node_agent_toml: %s: %r is not a TOML value" % (where, v))


def _table(d, path, out):
    for k, v in d.items():
        if v is None or _is_table(v) or _is_table_list(v):
            continue
        out.append("%s = %s" % (_key(k), _value(v, ".".join(path + [str(k)]))))
    for k, v in d.items():
        sub = path + [str(k)]
        name = ".".join(_key(p) for p in sub)
        if _is_table(v):
            out.append("")
            out.append("[%s]" % name)
            _table(v, sub, out)
        elif _is_table_list(v):
            for item in v:
                out.append("")
                out.append("[[%s]]" % name)
                _table(item, sub, out)


def rdma_node_agent_toml(config):
    if not isinstance(config, dict):
        raise ValueError("rdma_node_agent_toml: the config must be a mapping, not %r" % (config,))
    out = []
    _table(config, [], out)
    return "\n".join(out).lstrip("\n") + "\n"


class FilterModule(object):
    def filters(self):
        return {"rdma_node_agent_toml": rdma_node_agent_toml}
