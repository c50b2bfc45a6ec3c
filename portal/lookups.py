"""``field__any=[...]``: membership in a list as ONE query parameter.

Django's ``__in`` turns every element into its own parameter, and preparing 1,000
of them costs more than the query itself in a poll cycle; PostgreSQL takes the whole
list as one array (``= ANY(%s)``).
"""

from __future__ import annotations

from django.db.models import Field, ForeignObject, Lookup


@ForeignObject.register_lookup
@Field.register_lookup
class Any(Lookup):
    lookup_name = "any"
    prepare_rhs = False

    def get_db_prep_lookup(self, value, connection):
        return "%s", [list(value)]

    def as_sql(self, compiler, connection):
        lhs, lhs_params = self.process_lhs(compiler, connection)
        values = list(self.rhs)
        if not values:
            return "1 = 0", []  # nothing is a member of the empty list
        return f"{lhs} = ANY(%s)", [*lhs_params, values]
