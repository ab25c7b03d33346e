"""Issue 11, finding 2: a source cluster is a peer like any other. A fake broker that answers
ApiVersions sanely and then claims 2^32-2 brokers in every Metadata response, used as the source
of an API-created mirror, must not take the proxy down — neither when the mirror is created and
started nor after a restart, when the persisted mirror definition reaches the fake again."""

from sec_support import HostileBroker, assert_alive, client_round_trip, rest, running_proxy, unique, wait_until


def test_a_source_broker_answering_metadata_with_a_huge_array_count_cannot_take_the_proxy_down(clusters, workdir):
    source, destination = clusters
    fake = HostileBroker(source.bootstrap.split(",")[0])
    name = unique("hostile-src")
    try:
        with running_proxy(destination, workdir, env={"KMP_MIRROR_SOURCE_ALLOW": f"127.0.0.1:*,{fake.addr}"}) as proxy:
            status, created = rest(proxy, "POST", "/v1/mirrors",
                                   {"name": name, "configs": {"bootstrap.servers": fake.addr, "mirror.topics.include": "hostile-.*"}})
            assert_alive(proxy, "after creating a mirror of the hostile source")
            assert status == 201, f"creating a mirror of an allowed source answered {status}: {created}"
            status, started = rest(proxy, "POST", f"/v1/mirrors/{name}/start", {"topics": ["hostile-topic"]})
            # Discovery (include pattern) and the start both read the source's metadata.
            wait_until(lambda: fake.metadata_answers >= 2 or not proxy.alive(), 30, "two Metadata answers from the hostile source")
            assert_alive(proxy, "once the hostile source answered Metadata with a count of 2^32-2 brokers", watch_s=1.0)
            results = started.get("results", []) if isinstance(started, dict) else []
            codes = [r.get("error_code") for r in results]
            assert status != 200 or (codes and all(c != 0 for c in codes)), (
                f"starting a topic whose source metadata is garbage must report an error, not success: {status} {started}")
            client_round_trip(proxy.bootstrap, "while a mirror points at a hostile source")

            seen = fake.metadata_answers
            proxy.stop()
            proxy.proc = None
            try:
                proxy.start()  # the mirror definition is persisted: the restarted proxy reaches the fake again
            except AssertionError as e:
                raise AssertionError(f"the proxy could not start again with the hostile source's mirror persisted: {e}") from None
            wait_until(lambda: fake.metadata_answers > seen or not proxy.alive(), 30, "the restarted proxy to contact the hostile source")
            assert_alive(proxy, "after a restart, once the hostile source answered Metadata again", watch_s=1.0)
            client_round_trip(proxy.bootstrap, "after a restart with a hostile source mirror")
            assert_alive(proxy, "after a client round trip")
            status, body = rest(proxy, "DELETE", f"/v1/mirrors/{name}")
            assert status == 200, f"deleting the hostile source's mirror answered {status}: {body}"
    finally:
        fake.close()
