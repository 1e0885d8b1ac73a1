"""The rules file: its tables read into rules, predicates and the policy that applies them."""
