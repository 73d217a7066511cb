"""Trust boundaries (docs/security.md): each finding of the trust-boundaries issue, reproduced.

Every test here plays an attacker or a careless operator against a live server on
127.0.0.1, the admin, or real worker processes, and asserts what a user would
check: the request refused with the field named, the bad row's runs held, no
code run that the project did not register.
"""
