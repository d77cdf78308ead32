"""The rules, without I/O: ``verdicts`` (the answer table) says what an answer, or its absence, means
for a row; ``gates`` hold the auth, namespace, outage, breaker and schema gates, each owning its state
and its gauge; and ``surge`` tells a bad migration or script from steady churn for the breaker."""
