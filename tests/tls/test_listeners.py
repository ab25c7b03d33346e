"""One proxy, two client listeners (`[[listeners]]`) in front of the SASL_SSL destination:

- ``internal``: plaintext, SASL pass-through (the broker checks the client's own login), mirror
  management allowed;
- ``external``: TLS with the proxy's certificate, SASL terminated by the proxy against its own
  credentials file (a password the broker does not know), its own advertised host and node ports,
  ``mirror_management = false``.

Each listener's clients are told that listener's broker addresses, authenticate the way that
listener says, and mirror management works on the internal listener only. The single-`[listener]`
form is what every other proxy test of the suite runs (backwards compatibility)."""

from __future__ import annotations

import secrets
import subprocess
from pathlib import Path

from confluent_kafka.admin import AdminClient

from kmp_common import PROXY_BIN, ProxyProcess, free_port, free_port_block, unique
from tls.proxy_tls import (UPSTREAM_PW_ENV, client, credentials_file, listener_tls, log_tail, round_trip, suite_env,  # noqa: F401
                           upstream_properties)
from tls.proxy_tls import _toml_value
from tls.tls_clients import authentication_failed, connection_errors, error_names


def listeners_config(sections: dict[str, dict], listeners: list[dict]) -> str:
    """TOML: ``sections`` as tables, then one ``[[listeners]]`` per entry (its ``tls`` and ``auth``
    dicts as ``[listeners.tls]`` / ``[listeners.auth]``)."""
    out = []
    for name, values in sections.items():
        out.append(f"[{name}]")
        out += [f'"{k}" = {_toml_value(v)}' for k, v in values.items()]
    for entry in listeners:
        out.append("[[listeners]]")
        out += [f"{k} = {_toml_value(v)}" for k, v in entry.items() if not isinstance(v, dict)]
        for sub, values in entry.items():
            if isinstance(values, dict):
                out.append(f"[listeners.{sub}]")
                out += [f"{k} = {_toml_value(v)}" for k, v in values.items()]
    return "\n".join(out) + "\n"


def brokers_seen(conf: dict) -> dict[int, tuple[str, int]]:
    md = AdminClient(conf).list_topics(timeout=20)
    return {b.id: (b.host, b.port) for b in md.brokers.values()}


def mirrors(bootstrap: str, command_config: Path, action: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(PROXY_BIN), "mirrors", "--bootstrap-server", bootstrap, "--command-config", str(command_config), action],
                          capture_output=True, text=True, timeout=60)


def test_internal_and_external_listeners_each_have_their_addresses_authentication_and_mirror_management(suite_env, secure_destination):
    env = suite_env
    edge_password = secrets.token_hex(12)  # known to the proxy's credentials file only
    creds = credentials_file(env, [("alice", "SCRAM-SHA-512")], password=edge_password)
    internal_port, external_port = free_port(), free_port()
    internal_nodes, external_nodes = free_port_block(16), free_port_block(16)
    text = listeners_config(
        {"upstream.properties": upstream_properties(env.certs, "SASL_SSL"),
         "engine": {"state_topic": unique("__kmp_state_listeners")}},
        [{"name": "internal", "listen": f"127.0.0.1:{internal_port}", "node_port_base": internal_nodes},
         {"name": "external", "listen": f"127.0.0.1:{external_port}", "node_port_base": external_nodes,
          "advertised_host": "localhost", "mirror_management": False,
          "tls": listener_tls(env.certs),
          "auth": {"mode": "terminate", "mechanisms": ["SCRAM-SHA-512"], "credentials_file": creds}}])
    path = env.path("proxy-listeners", ".toml")
    path.write_text(text)
    proxy = ProxyProcess(secure_destination.bootstrap_for("SASL_SSL"), env.workdir, ["--config", str(path), "--log", "debug"],
                         env={UPSTREAM_PW_ENV: env.users["proxy"]})
    # The listeners come from [[listeners]]: the harness's --listen / --node-port-base would set
    # [listener] beside them, which the proxy refuses (checked below).
    flags = proxy.args
    for flag in ("--listen", "--node-port-base"):
        i = flags.index(flag)
        del flags[i:i + 2]
    proxy.port = internal_port
    proxy.start()
    try:
        internal = client(env, "plaintext", "alice", "SCRAM-SHA-512")  # the broker checks alice's own password
        external = client(env, "tls", "alice", "SCRAM-SHA-512", password=edge_password)
        internal_conf = internal.librdkafka(f"127.0.0.1:{internal_port}")
        external_conf = external.librdkafka(f"localhost:{external_port}")

        seen = brokers_seen(internal_conf)
        assert seen == {1: ("127.0.0.1", internal_nodes + 1)}, f"internal listener's clients are told {seen}"
        seen = brokers_seen(external_conf)
        assert seen == {1: ("localhost", external_nodes + 1)}, f"external listener's clients are told {seen}"

        round_trip(internal_conf, "internal listener pass-through")
        round_trip(external_conf, "external listener terminated")

        # Each listener authenticates its own way: the proxy-only password works on the external
        # listener (terminated) and is refused by the broker on the internal one (pass-through).
        errors = connection_errors(client(env, "plaintext", "alice", "SCRAM-SHA-512", password=edge_password)
                                   .librdkafka(f"127.0.0.1:{internal_port}"))
        assert authentication_failed(errors), f"the internal listener passes SASL to the broker, which must refuse: {error_names(errors)}"
        errors = connection_errors(client(env, "tls", "alice", "SCRAM-SHA-512").librdkafka(f"localhost:{external_port}"))
        assert authentication_failed(errors), f"the external listener checks its credentials file: {error_names(errors)}"

        props = env.path("listeners-cli")
        props.mkdir()
        for action in ("--list", "--describe"):
            ok = mirrors(f"127.0.0.1:{internal_port}", internal.java_properties(props), action)
            assert ok.returncode == 0, f"mirrors {action} on the internal listener: exit {ok.returncode}\n{ok.stdout}{ok.stderr}"
            refused = mirrors(f"localhost:{external_port}", external.java_properties(props), action)
            assert refused.returncode == 1 and refused.stdout == "" and "CLUSTER_MIRROR_AUTHORIZATION_FAILED: mirror management is not allowed on listener `external`" in refused.stderr, (
                f"mirrors {action} on the external listener must be refused naming it, on stderr, exit 1: exit {refused.returncode}\n"
                f"stdout: {refused.stdout}\nstderr: {refused.stderr}")
        assert proxy.metric("kmp_refused_requests_total", 'reason="mirror_admin_unauthorized"') >= 1
    finally:
        code = proxy.stop()
    assert code == 0, f"the proxy exited {code} on SIGTERM:\n{log_tail(proxy)}"
    log = proxy.log()
    for name in ("internal", "external"):
        assert f"listener={name}" in log and "kafka-mirror-proxy listening" in log, f"start-up names listener {name}"


def test_listeners_beside_the_listener_flags_are_refused_with_every_problem(suite_env, secure_destination, tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text(listeners_config({}, [{"name": "a", "listen": "127.0.0.1:1"}, {"name": "a", "listen": "127.0.0.1:1"}]))
    out = subprocess.run([str(PROXY_BIN), "run", "--config", str(path), "--upstream", "127.0.0.1:9", "--listen", "127.0.0.1:2"],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 2, f"exit {out.returncode}: {out.stderr}"
    for text in ("listener.listen: set per listener in [[listeners]]", "listeners[1].name: `a` is used by another listener",
                 "listeners[1].listen: `127.0.0.1:1` is used by another listener"):
        assert text in out.stderr, f"missing `{text}` in:\n{out.stderr}"
    assert out.stdout == "", "configuration errors go to stderr"
