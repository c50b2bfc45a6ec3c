"""Dates and times as the portal writes them in English: one style everywhere (pages,
messages, e-mail), year first and 24-hour, as operators read logs and Grafana. Django's
own English formats mixed "Dec. 2, 2026, 4:51 p.m.", "5 p.m." and "12/02/2026 5:02 p.m."."""

DATE_FORMAT = "Y-m-d"
SHORT_DATE_FORMAT = "Y-m-d"
DATETIME_FORMAT = "Y-m-d H:i"
SHORT_DATETIME_FORMAT = "Y-m-d H:i"
TIME_FORMAT = "H:i"
YEAR_MONTH_FORMAT = "Y-m"
MONTH_DAY_FORMAT = "m-d"
FIRST_DAY_OF_WEEK = 1  # Monday
