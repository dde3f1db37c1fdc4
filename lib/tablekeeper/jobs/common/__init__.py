"""What several jobs share and no job owns: the job contract (context, options, results and
their schema, Delta option declarations), engines, the ledger of runs, and Delta maintenance."""
