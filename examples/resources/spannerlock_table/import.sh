# By the table's ID:
terraform import spannerlock_table.locks projects/my-project/instances/my-instance/databases/my-database/tables/locks

# Or by its name alone, in the provider's database:
terraform import spannerlock_table.locks locks
