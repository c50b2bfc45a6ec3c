"""Dates and times in Simplified Chinese: the same numeric style as in English
(portal/formats/en), which Chinese readers use in software; Django's own uses 年月日."""

DATE_FORMAT = "Y-m-d"
SHORT_DATE_FORMAT = "Y-m-d"
DATETIME_FORMAT = "Y-m-d H:i"
SHORT_DATETIME_FORMAT = "Y-m-d H:i"
TIME_FORMAT = "H:i"
YEAR_MONTH_FORMAT = "Y-m"
MONTH_DAY_FORMAT = "m-d"
FIRST_DAY_OF_WEEK = 1
