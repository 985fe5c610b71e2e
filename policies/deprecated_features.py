"""RabbitMQ 4.3's deprecated features that it denies by default
(rabbit_deprecated_features.erl; 4.3.0's release notes), with the words it
refuses them in, and the config key that permits them again
(`permit_deprecated_features`, as rabbitmq.conf's
`deprecated_features.permit.<name> = true`).  Only a virtual host
following 4.3's semantics denies them; 3.13 permits them all."""

from __future__ import annotations

from collections.abc import Collection

from dlx.semantics import is_4x

# Non-durable, non-exclusive queues (rabbit_amqqueue:declare/7).
TRANSIENT_NONEXCL_QUEUES = "transient_nonexcl_queues"
# basic.qos with global=true (rabbit_channel: taken as global=false).
GLOBAL_QOS = "global_qos"
# x-queue-master-locator (rabbit_classic_queue:validate_arguments/1).
QUEUE_MASTER_LOCATOR = "queue_master_locator"
# The ones this broker has something to deny for (4.3 also denies
# amqp_address_v1 and amqp_filter_set_bug, of AMQP 1.0).
DENIED_BY_DEFAULT = (TRANSIENT_NONEXCL_QUEUES, GLOBAL_QOS, QUEUE_MASTER_LOCATOR)


def permitted(feature: str, semantics: str, permits: Collection[str] = ()) -> bool:
    """Whether `feature` may be used: always under 3.13, under 4.3 only if
    the config permits it."""
    return not is_4x(semantics) or feature in permits


def denied_message(feature: str) -> str:
    """rabbit_deprecated_features:generate_warnings1/3's `when_denied` for a
    feature in its denied_by_default phase (the lines joined by newlines,
    as ~n writes them)."""
    return (f"Feature `{feature}` is deprecated.\n"
            "By default, this feature is not permitted anymore.\n"
            "The feature will be removed from a future major RabbitMQ version, regardless "
            "of the configuration; actual version to be determined.\n"
            "To continue using this feature when it is not permitted by default, set the "
            "following parameter in your configuration:\n"
            f'    "deprecated_features.permit.{feature} = true"')


def permit_problem(value: object) -> str | None:
    """What is wrong with a `permit_deprecated_features` list, in plain words."""
    if not isinstance(value, list) or not all(isinstance(name, str) for name in value):
        return "permit_deprecated_features must be a list of feature names"
    unknown = [name for name in value if name not in DENIED_BY_DEFAULT]
    if unknown:
        known = ", ".join(f'"{name}"' for name in DENIED_BY_DEFAULT)
        return (f'permit_deprecated_features: unknown feature "{unknown[0]}"; the features '
                f"RabbitMQ 4.3 denies that this broker has are {known}")
    return None
