"""The student portal at /portal/ (issue 25): a student signed in through their institution's
identity provider sees their license, wallet, usage and models, reads the data-flow notice,
accepts the terms of use and makes or revokes their own API keys. Views parse and call;
reads are in `selectors`, writes in `services`."""
