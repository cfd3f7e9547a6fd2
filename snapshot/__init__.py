"""The gateway snapshot's contract, a leaf both the console and the gateway import.

``snapshot.publish`` writes the snapshot to Redis (the console's apps call it, each for its own
section); ``snapshot.contract`` says what it holds and reads it back (the gateway serves from it).
Django-free and importing nothing of the project, so neither side depends on the other (ADR 0026).
"""
