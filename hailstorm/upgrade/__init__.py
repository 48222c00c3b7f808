"""Upgrading a running topology: describe what a deployment declared
(:mod:`.describe`), decide node by node what a new topology's run does to it (:mod:`.plan`;
Avro schema resolution is :mod:`hailstorm.snapshots.evolution`'s), and read the deployed
side from ZooKeeper and the snapshots, then carry out the plan's record edits
(:mod:`.deployed`). See docs/upgrading.md.
"""
