"""The typer commands: parse options, call a service, render its events."""
