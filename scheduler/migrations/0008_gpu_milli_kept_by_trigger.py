# Gpu.allocated_milli is kept by the database itself: triggers on scheduler_gpuassignment add a live
# assignment's milli to its GPU and take it off again when the assignment is released or deleted, whoever
# writes (the tick, the admin's cascade delete, a shell). The GPU's check constraint still refuses an
# overcommit, now from inside the trigger. The counter is recomputed from the live assignments first, so a
# database a stale counter had wedged comes out of this migration whole.

from django.db import migrations

RECOMPUTE = """
UPDATE topology_gpu SET allocated_milli = COALESCE((
    SELECT SUM(a.milli) FROM scheduler_gpuassignment a WHERE a.gpu_id = topology_gpu.id AND a.released_at IS NULL
), 0)
"""

SQLITE_FORWARD = [
    RECOMPUTE,
    """
    CREATE TRIGGER scheduler_gpuassignment_milli_insert AFTER INSERT ON scheduler_gpuassignment
    WHEN NEW.released_at IS NULL
    BEGIN
        UPDATE topology_gpu SET allocated_milli = allocated_milli + NEW.milli WHERE id = NEW.gpu_id;
    END
    """,
    """
    CREATE TRIGGER scheduler_gpuassignment_milli_update AFTER UPDATE OF gpu_id, milli, released_at
    ON scheduler_gpuassignment
    BEGIN
        UPDATE topology_gpu SET allocated_milli = allocated_milli - OLD.milli
            WHERE id = OLD.gpu_id AND OLD.released_at IS NULL;
        UPDATE topology_gpu SET allocated_milli = allocated_milli + NEW.milli
            WHERE id = NEW.gpu_id AND NEW.released_at IS NULL;
    END
    """,
    """
    CREATE TRIGGER scheduler_gpuassignment_milli_delete AFTER DELETE ON scheduler_gpuassignment
    WHEN OLD.released_at IS NULL
    BEGIN
        UPDATE topology_gpu SET allocated_milli = allocated_milli - OLD.milli WHERE id = OLD.gpu_id;
    END
    """,
]
SQLITE_BACKWARD = [
    "DROP TRIGGER IF EXISTS scheduler_gpuassignment_milli_insert",
    "DROP TRIGGER IF EXISTS scheduler_gpuassignment_milli_update",
    "DROP TRIGGER IF EXISTS scheduler_gpuassignment_milli_delete",
]

# Increments, not a recount: under READ COMMITTED a blocked UPDATE re-reads the GPU row it waited for, so two
# concurrent writers each add their own milli to the latest value.
POSTGRES_FORWARD = [
    RECOMPUTE,
    """
    CREATE FUNCTION scheduler_gpuassignment_keep_milli() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        IF TG_OP IN ('UPDATE', 'DELETE') AND OLD.released_at IS NULL THEN
            UPDATE topology_gpu SET allocated_milli = allocated_milli - OLD.milli WHERE id = OLD.gpu_id;
        END IF;
        IF TG_OP IN ('INSERT', 'UPDATE') AND NEW.released_at IS NULL THEN
            UPDATE topology_gpu SET allocated_milli = allocated_milli + NEW.milli WHERE id = NEW.gpu_id;
        END IF;
        RETURN NULL;
    END
    $$
    """,
    """
    CREATE TRIGGER scheduler_gpuassignment_milli AFTER INSERT OR DELETE OR UPDATE OF gpu_id, milli, released_at
    ON scheduler_gpuassignment FOR EACH ROW EXECUTE FUNCTION scheduler_gpuassignment_keep_milli()
    """,
]
POSTGRES_BACKWARD = [
    "DROP TRIGGER IF EXISTS scheduler_gpuassignment_milli ON scheduler_gpuassignment",
    "DROP FUNCTION IF EXISTS scheduler_gpuassignment_keep_milli()",
]


def forward(apps, schema_editor):
    statements = POSTGRES_FORWARD if schema_editor.connection.vendor == "postgresql" else SQLITE_FORWARD
    for statement in statements:
        schema_editor.execute(statement)


def backward(apps, schema_editor):
    statements = POSTGRES_BACKWARD if schema_editor.connection.vendor == "postgresql" else SQLITE_BACKWARD
    for statement in statements:
        schema_editor.execute(statement)


class Migration(migrations.Migration):

    dependencies = [
        ("scheduler", "0007_job_earmarked_gpus"),
        ("topology", "0007_cluster_submit_policy"),
    ]

    operations = [migrations.RunPython(forward, backward)]
