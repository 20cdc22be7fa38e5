"""The SQL results store (:class:`~orchestrator.store.results.ResultsStore`): rows and states,
engine and URL, the statements of each table, the sweep lease, migrations."""
