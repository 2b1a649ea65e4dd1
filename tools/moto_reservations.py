"""EC2 capacity reservations for moto 5.2.5, which has none: kerf-aws's tests' stand-in.

moto 5.2.5 implements neither CreateCapacityReservation nor DescribeCapacityReservations, and its
CreateFleet ignores a launch template's `CapacityReservationSpecification` (and launches nothing
for a `capacity-block` target capacity type). `install()` adds, in moto's own server process
(tools/moto-fixture.py calls it), just enough of them to test kerf's use of reservations:

- CreateCapacityReservation: InstanceType, AvailabilityZone, InstanceCount,
  InstanceMatchCriteria (default `open`), EndDate, TagSpecifications. The reservation is
  `active` at once and owned by the account. EC2 sells capacity blocks through
  PurchaseCapacityBlock; here a reservation tagged `kerf.test/reservation-type: capacity-block`
  is one (`ReservationType: capacity-block`).
- DescribeCapacityReservations: CapacityReservationIds (an unknown id is
  `InvalidCapacityReservationId.NotFound`) and the filters `instance-type`, `owner-id`,
  `availability-zone`, `instance-match-criteria`, `state`, `reservation-type`, `tag:<key>`,
  `tag-key`. AvailableInstanceCount is the count less the live instances launched into it.
- CancelCapacityReservation: the reservation turns `cancelled`.
- CreateFleet: a launch template whose `CapacityReservationSpecification` targets a reservation
  launches into it only while it has room and only an override of its instance type and zone;
  otherwise that template's overrides come back as errors (`ReservationCapacityExceeded`, as EC2
  answers for a full targeted reservation) and nothing of them launches. A `capacity-block`
  target capacity type launches as on-demand does. An on-demand instance launched without a
  target goes into an active `open` reservation of its type and zone that has room, as on EC2,
  unless its template's `CapacityReservationPreference` is `none`. An instance launched into a reservation
  carries its `CapacityReservationId` in DescribeInstances (and `InstanceLifecycle:
  capacity-block` in a capacity block), as on EC2, and counts against the reservation's
  AvailableInstanceCount while it lives.

Interruptible reservations are not modelled: DescribeCapacityReservations never returns
`Interruptible`, and nothing is reclaimed.

Everything else is moto's own behaviour.
"""

import datetime
import itertools
import threading

from moto.core.responses import ActionResult
from moto.ec2.exceptions import EC2ClientError
from moto.ec2.responses import EC2Response

CAPACITY_BLOCK_TAG = "kerf.test/reservation-type"

_lock = threading.Lock()
_ids = itertools.count(1)
# (account, region) -> id -> reservation
_reservations = {}


def not_found(ids):
    # moto names an error's service by its class's module: the class must be moto.ec2's own.
    return EC2ClientError(
        "InvalidCapacityReservationId.NotFound", f"The capacity reservation IDs {', '.join(ids)} do not exist"
    )


def _store(response):
    return _reservations.setdefault((response.current_account, response.region), {})


def _live(backend, instance_id):
    try:
        instance = backend.get_instance_by_id(instance_id)
    except Exception:  # noqa: BLE001 - moto raises its own not-found error
        return False
    return instance is not None and instance.state not in ("terminated", "shutting-down")


def _available(backend, r):
    used = sum(1 for i in r["instances"] if _live(backend, i))
    return max(r["count"] - used, 0) if r["state"] == "active" else 0


def _answer(backend, r):
    out = {
        "CapacityReservationId": r["id"],
        "OwnerId": r["owner"],
        "CapacityReservationArn": f"arn:aws:ec2:{r['region']}:{r['owner']}:capacity-reservation/{r['id']}",
        "InstanceType": r["instance_type"],
        "InstancePlatform": "Linux/UNIX",
        "AvailabilityZone": r["zone"],
        "Tenancy": "default",
        "TotalInstanceCount": r["count"],
        "AvailableInstanceCount": _available(backend, r),
        "State": r["state"],
        "InstanceMatchCriteria": r["criteria"],
        "ReservationType": r["type"],
        "StartDate": r["start"],
        "CreateDate": r["start"],
        "EndDateType": "limited" if r["end"] else "unlimited",
        "Tags": [{"Key": k, "Value": v} for k, v in r["tags"].items()],
    }
    if r["end"]:
        out["EndDate"] = r["end"]
    return out


def _matches(r, filters):
    for name, values in filters.items():
        if name.startswith("tag:"):
            have = r["tags"].get(name[4:])
        elif name == "tag-key":
            if not any(v in r["tags"] for v in values):
                return False
            continue
        else:
            have = {
                "instance-type": r["instance_type"],
                "owner-id": r["owner"],
                "availability-zone": r["zone"],
                "instance-match-criteria": r["criteria"],
                "state": r["state"],
                "reservation-type": r["type"],
            }.get(name)
        if have not in values:
            return False
    return True


def create_capacity_reservation(self):
    tags = self._parse_tag_specification().get("capacity-reservation", {})
    end = self._get_param("EndDate")
    r = {
        "id": f"cr-{next(_ids):017x}",
        "owner": self.current_account,
        "region": self.region,
        "instance_type": self._get_param("InstanceType"),
        "zone": self._get_param("AvailabilityZone"),
        "count": int(self._get_param("InstanceCount", 1)),
        "criteria": self._get_param("InstanceMatchCriteria", "open"),
        "type": "capacity-block" if tags.get(CAPACITY_BLOCK_TAG) == "capacity-block" else "default",
        "tags": dict(tags),
        "state": "active",
        "start": datetime.datetime.now(datetime.timezone.utc),
        "end": end,
        "instances": set(),
    }
    self.error_on_dryrun()
    with _lock:
        _store(self)[r["id"]] = r
    return ActionResult({"CapacityReservation": _answer(self.ec2_backend, r)})


def describe_capacity_reservations(self):
    ids = self._get_param("CapacityReservationIds", [])
    filters = self._filters_from_querystring()
    with _lock:
        store = dict(_store(self))
    missing = [i for i in ids if i not in store]
    if missing:
        raise not_found(missing)
    chosen = [r for r in store.values() if (not ids or r["id"] in ids) and _matches(r, filters)]
    return ActionResult({"CapacityReservations": [_answer(self.ec2_backend, r) for r in chosen]})


def cancel_capacity_reservation(self):
    rid = self._get_param("CapacityReservationId")
    with _lock:
        r = _store(self).get(rid)
        if r is None:
            raise not_found([rid])
        r["state"] = "cancelled"
    return ActionResult({"Return": True})


def _template_data(backend, spec):
    if "LaunchTemplateId" in spec:
        template = backend.get_launch_template(spec["LaunchTemplateId"])
    else:
        template = backend.get_launch_template_by_name(spec["LaunchTemplateName"])
    version = spec.get("Version")
    if version in (None, "$Default"):
        version = template.default_version_number
    elif version == "$Latest":
        version = template.latest_version_number
    return template.get_version(version).data


def _target(data):
    spec = data.get("CapacityReservationSpecification") or {}
    return (spec.get("CapacityReservationTarget") or {}).get("CapacityReservationId")


def _avoids_open(data):
    spec = data.get("CapacityReservationSpecification") or {}
    return spec.get("CapacityReservationPreference") == "none"


def _place_in_open(backend, store, instance):
    """As EC2 does for an instance launched without a target: the first active `open`
    reservation of its type and zone with room takes it."""
    for r in store.values():
        if (
            r["criteria"] == "open"
            and r["instance_type"] == instance.instance_type
            and r["zone"] == instance.availability_zone
            and _available(backend, r) > 0
        ):
            r["instances"].add(instance.id)
            instance.capacity_reservation_id = r["id"]
            return


def _error(override, code, message):
    return {
        "LaunchTemplateAndOverrides": {"Overrides": override},
        "Lifecycle": "on-demand",
        "ErrorCode": code,
        "ErrorMessage": message,
    }


def install():
    """Adds the actions above to moto's EC2 API (once per process)."""
    if getattr(EC2Response, "_kerf_reservations", False):
        return
    original_create_fleet = EC2Response.create_fleet

    def create_fleet(self):
        params = self.params
        target = params.get("TargetCapacitySpecification") or {}
        if target.get("DefaultTargetCapacityType") == "capacity-block":
            target["DefaultTargetCapacityType"] = "on-demand"
        configs = params.get("LaunchTemplateConfigs") or []
        backend = self.ec2_backend
        kept, errors, targeted, open_ok = [], [], {}, set()
        with _lock:
            store = _store(self)
            for config in configs:
                spec = config.get("LaunchTemplateSpecification") or {}
                data = _template_data(backend, spec)
                rid = _target(data)
                if rid is None:
                    kept.append(config)
                    if not _avoids_open(data):
                        open_ok.add(spec.get("LaunchTemplateName") or spec.get("LaunchTemplateId"))
                    continue
                r = store.get(rid)
                overrides = []
                for o in config.get("Overrides") or []:
                    if r is None:
                        errors.append(_error(o, "InvalidCapacityReservationId.NotFound", f"{rid} does not exist"))
                    elif o.get("InstanceType") != r["instance_type"] or (
                        o.get("AvailabilityZone") not in (None, r["zone"])
                    ):
                        errors.append(_error(o, "InvalidParameterValue", f"{rid} holds {r['instance_type']} in {r['zone']}"))
                    elif _available(backend, r) < 1:
                        errors.append(
                            _error(o, "ReservationCapacityExceeded", f"The capacity reservation {rid} is full")
                        )
                    else:
                        overrides.append(o)
                if overrides:
                    config["Overrides"] = overrides
                    kept.append(config)
                    name = spec.get("LaunchTemplateName") or spec.get("LaunchTemplateId")
                    targeted[name] = rid
        if not kept:
            return ActionResult({"FleetId": "fleet-00000000-0000-0000-0000-000000000000", "Errors": errors, "Instances": []})
        params["LaunchTemplateConfigs"] = kept
        answer = original_create_fleet(self)
        result = answer.result
        for instance in result.get("Instances") or []:
            spec = (instance.get("LaunchTemplateAndOverrides") or {}).get("LaunchTemplateSpecification") or {}
            rid = targeted.get(spec.get("LaunchTemplateName")) or targeted.get(spec.get("LaunchTemplateId"))
            if rid is None:
                name = spec.get("LaunchTemplateName") or spec.get("LaunchTemplateId")
                if instance.get("Lifecycle") != "spot" and (name in open_ok):
                    for iid in instance.get("InstanceIds") or []:
                        launched = backend.get_instance_by_id(iid)
                        if launched is not None:
                            with _lock:
                                _place_in_open(backend, _store(self), launched)
                continue
            ids = instance.get("InstanceIds") or []
            with _lock:
                r = _store(self)[rid]
                r["instances"].update(ids)
            # DescribeInstances names the reservation (and a capacity block's lifecycle).
            for iid in ids:
                launched = backend.get_instance_by_id(iid)
                if launched is None:
                    continue
                launched.capacity_reservation_id = rid
                if r["type"] == "capacity-block":
                    launched.instance_lifecycle = "capacity-block"
        if errors:
            result["Errors"] = list(result.get("Errors") or []) + errors
        return answer

    EC2Response.create_capacity_reservation = create_capacity_reservation
    EC2Response.describe_capacity_reservations = describe_capacity_reservations
    EC2Response.cancel_capacity_reservation = cancel_capacity_reservation
    EC2Response.create_fleet = create_fleet
    EC2Response._kerf_reservations = True
