"""The SQL results store: rows and states, engine and URL, the sweep lease, migrations."""
