"""Debian's chromium driven through its chromedriver (Selenium), for the
web console's tests: nothing is downloaded at run time.  Without chromium
the tests skip locally and fail under CI, which installs it."""

from __future__ import annotations

import os
import shutil

from .conftest import missing

CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("CHROMEDRIVER", "/usr/bin/chromedriver")
HINT = "install Debian's chromium and chromium-driver (`apt-get install -y chromium " \
       "chromium-driver`, as .ci/run does)"
WAIT = 20.0  # seconds any one thing may take to show up


def start_chromium():
    """A headless chromium, or skip (fail under CI) when the machine has none."""
    for path in (CHROMIUM, CHROMEDRIVER):
        if not (os.path.exists(path) or shutil.which(path)):
            missing(f"no {path}: the web console's browser tests need it ({HINT})")
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        missing("selenium is not installed: `pip install -e .[test]`")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                     "--disable-gpu", "--window-size=1400,1000"):
        options.add_argument(argument)
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)


class Console:
    """The console as a user sees it: log in, open pages, read and click."""

    def __init__(self, driver, base_url: str) -> None:
        from selenium.webdriver.common.by import By
        from selenium.webdriver.support.ui import WebDriverWait

        self.driver = driver
        self.base = base_url
        self.by = By
        self.wait = WebDriverWait(driver, WAIT)

    def login(self, user: str, password: str, refused: bool = False) -> None:
        """Log in (and wait until the console says who is in, unless the
        login is to be `refused`)."""
        self.driver.get(self.base + "/")
        self.driver.execute_script("sessionStorage.clear()")
        self.driver.get(self.base + "/?login")
        self.type("login-username", user)
        self.type("login-password", password)
        self.find("login-submit").click()
        if not refused:
            self.logged_in_as(user)

    def logged_in_as(self, user: str) -> None:
        self.until(lambda: self.find("who").text.startswith(user + " "))

    def open(self, view: str) -> None:
        self.driver.get(f"{self.base}/?view#/{view}")

    def find(self, element_id: str):
        """The element, once the page has drawn it (bounded wait)."""
        return self.wait.until(lambda driver: driver.find_element(self.by.ID, element_id),
                               f"no #{element_id}")

    def css(self, selector: str, root=None):
        return (root or self.driver).find_elements(self.by.CSS_SELECTOR, selector)

    def type(self, element_id: str, text: str) -> None:
        field = self.find(element_id)
        field.clear()
        field.send_keys(text)

    def until(self, condition, message: str = ""):
        """Wait (bounded) for `condition()` to be truthy; its value."""
        from selenium.common.exceptions import StaleElementReferenceException, WebDriverException

        def attempt(_driver):
            try:
                return condition()
            except (StaleElementReferenceException, WebDriverException):
                return False
        return self.wait.until(attempt, message)

    def text(self, element_id: str) -> str:
        return self.find(element_id).text

    def column(self, table_id: str, title: str) -> list[str] | None:
        """The cells of one column of a console table, top to bottom; None
        before the page has drawn the table."""
        heads = [th.text for th in self.css(f"#{table_id} thead th")]
        if title not in heads:
            return None
        index = heads.index(title) + 1
        return [td.text for td in self.css(f"#{table_id} tbody tr td:nth-child({index})")]

    def shows(self, table_id: str, title: str, wanted: list[str]) -> None:
        """Wait until the column holds exactly `wanted` (in order)."""
        self.until(lambda: self.column(table_id, title) == wanted,
                   f"{table_id}.{title} never became {wanted}")


def row_of(console: Console, message_id: str):
    """The workbench's one row of `message_id`."""
    rows = console.css(f'#messages tbody tr[data-message-id="{message_id}"]')
    assert len(rows) == 1, message_id
    return rows[0]
