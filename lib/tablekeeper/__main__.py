from tablekeeper.cli import entrypoint

entrypoint()
