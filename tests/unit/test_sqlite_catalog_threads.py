"""One SQLite catalog connection shared by threads (an answer's and the state keeper's): each
transaction belongs to one thread at a time, so none fails for another's."""

import threading

from skillgraft.store.catalog import SqliteCatalog


def test_threads_sharing_a_catalog_write_and_read_without_colliding(tmp_path):
    catalog = SqliteCatalog(tmp_path / "catalog.db")
    catalog.execute("CREATE TABLE counts (worker INTEGER, n INTEGER)")
    errors: list[BaseException] = []

    def work(worker: int) -> None:
        try:
            for n in range(150):
                with catalog.write() as conn:
                    conn.execute("INSERT INTO counts VALUES (?, ?)", (worker, n))
                with catalog.read() as conn:
                    conn.execute("SELECT count(*) FROM counts").fetchone()
                catalog.query("SELECT max(n) AS m FROM counts WHERE worker = ?", [worker])
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(w,)) for w in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors[:2]
    assert catalog.query("SELECT count(*) AS n FROM counts") == [{"n": 600}]  # nothing lost
    catalog.close()
