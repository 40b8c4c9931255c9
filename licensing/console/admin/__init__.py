"""The licensing admin pages, one module per subject: `licenses` (institutions, license types,
licenses), `keys` (API keys, JWT issuers, end users), `transactions` (the ledger and the pages on
its URLs), `wallets` (wallets, budget alerts), `users` (users and their institution role); `base`
holds the scoping every page shares. `licensing/admin.py` imports them for autodiscovery."""
