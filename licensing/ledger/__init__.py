"""The money: wallets and budgets, the ledger rows and their one door (`actions`), the group
commit, the durable spool, budget alerts and the live feed's publishing side
(docs/architecture.md, "The money path")."""
