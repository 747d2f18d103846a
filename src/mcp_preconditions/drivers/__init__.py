"""What drives a Guard's policy from above it: a policy file watched and reloaded (`reload`), a
signed bundle fetched from a URL (`bundle`), and policy test files run against it (`policy_tests`).

`policy/` below holds the file model and its loading, which auth and the resolvers read; nothing
there imports the guard. Everything here does.
"""
