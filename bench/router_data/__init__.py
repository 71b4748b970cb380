"""Router benchmark data: the synthetic replay generator (``synthetic``, its texts in ``synthetic_text``)
and the cost-quality curves as a PNG (``plot``, matplotlib: the ``bench`` extra)."""
