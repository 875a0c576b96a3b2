# The table applications pass to lease.NewClient(spannerClient, "locks").
resource "spannerlock_table" "locks" {
  name = "locks"

  # Delete rows of leases nobody has renewed for 30 days. Tokens stay
  # monotonic: a name whose row was deleted resumes above every token it had.
  cleanup_after = "30d"

  # The defaults, spelled out: destroy is refused, and with protection off it
  # is still refused while any lease in the table is live.
  deletion_protection = true
  force_destroy       = false

  timeouts {
    create = "20m"
    update = "20m"
  }
}
